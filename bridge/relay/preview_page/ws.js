// Added by the previews' service worker to each page it serves (docs/protocol.md, "The
// previews' origin"): a WebSocket to the page's own host (a dev server's live reload) cannot be
// answered by a service worker, so this one is carried by the web client's page through the
// relay instead, through the bootstrap page above this one. A WebSocket to another host is the
// browser's own.
(() => {
  const Native = window.WebSocket;
  const PAGE = '/__agent-bridge/preview';

  function bootstrap() {
    let w = window;
    try {
      while (w !== w.parent) {
        w = w.parent;
        if (w.location.pathname === PAGE) return w;
      }
    } catch { /* a frame of another origin above: not in a preview */ }
    return null;
  }

  class RelayedWebSocket extends EventTarget {
    constructor(url, protocols, boot) {
      super();
      this.url = url.href;
      this.protocol = '';
      this.extensions = '';
      this.readyState = 0;
      this.bufferedAmount = 0;
      this.binaryType = 'blob';
      this.onopen = null;
      this.onmessage = null;
      this.onerror = null;
      this.onclose = null;
      const { port1, port2 } = new MessageChannel();
      this._port = port1;
      port1.onmessage = ({ data }) => this._answer(data);
      const list = protocols === undefined ? [] : [].concat(protocols).map(String);
      boot.postMessage({ type: 'agent-bridge-ws', target: url.pathname + url.search, protocols: list }, location.origin, [port2]);
    }

    _fire(ev) {
      this.dispatchEvent(ev);
      this[`on${ev.type}`]?.call(this, ev);
    }

    _answer(data) {
      if (data?.open && this.readyState === 0) {
        this.readyState = 1;
        this.protocol = data.open.protocol || '';
        this._fire(new Event('open'));
      } else if (data && 'message' in data && this.readyState === 1) {
        const raw = data.message;
        const body = typeof raw === 'string' || this.binaryType === 'arraybuffer' ? raw : new Blob([raw]);
        this._fire(new MessageEvent('message', { data: body, origin: location.origin }));
      } else if (data?.close && this.readyState !== 3) {
        this.readyState = 3;
        if (data.close.error) this._fire(new Event('error'));
        const { code = 1006, reason = '' } = data.close;
        this._fire(new CloseEvent('close', { code, reason, wasClean: !data.close.error }));
        this._port.close();
      }
    }

    send(data) {
      if (this.readyState === 0) throw new DOMException('Still in CONNECTING state.', 'InvalidStateError');
      if (this.readyState !== 1) return;
      if (typeof data === 'string') this._port.postMessage({ send: data });
      else if (data instanceof Blob) data.arrayBuffer().then((b) => this._port.postMessage({ send: b }, [b]));
      else if (ArrayBuffer.isView(data)) {
        const b = data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
        this._port.postMessage({ send: b }, [b]);
      } else if (data instanceof ArrayBuffer) this._port.postMessage({ send: data.slice(0) });
      else this._port.postMessage({ send: String(data) });
    }

    close(code = 1000, reason = '') {
      if (code !== 1000 && (code < 3000 || code > 4999)) throw new DOMException('Invalid close code.', 'InvalidAccessError');
      if (this.readyState >= 2) return;
      this.readyState = 2;
      this._port.postMessage({ close: { code, reason: String(reason) } });
    }
  }
  for (const [k, v] of Object.entries({ CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 })) {
    RelayedWebSocket[k] = v;
    RelayedWebSocket.prototype[k] = v;
  }

  function WebSocket(url, protocols) {
    const where = new URL(url, location.href);
    const boot = bootstrap();
    if (!boot || where.host !== location.host) return new Native(url, protocols);
    return new RelayedWebSocket(where, protocols, boot);
  }
  for (const k of ['CONNECTING', 'OPEN', 'CLOSING', 'CLOSED']) WebSocket[k] = Native[k];
  WebSocket.prototype = Native.prototype;
  window.WebSocket = WebSocket;
})();
