// Preview (docs/protocol.md, "Preview"): the app a session's dev server serves on the
// workstation's loopback, shown full screen through the daemon. The page runs in an iframe of
// the preview's own origin (a port of its own), never in this page's: it cannot read this
// client's tokens, relay keys, IndexedDB or service worker (docs/security.md, "Preview").
// Through a relay, the page runs in the previews' own origin that `relay serve` serves (a port
// of its own), and this page carries its requests sealed over the relay (net/preview-tunnel.js).

import { RelayPreview } from '../net/preview-tunnel.js';
import { appendAll, clear, codeSpans, h } from '../ui/dom.js';

/** What the iframe may do: its own origin's scripts and forms, popups; never navigate this
 *  page away (no allow-top-navigation). */
export const SANDBOX = 'allow-scripts allow-same-origin allow-forms allow-popups allow-modals allow-downloads';

/** The preview's URL as this page reaches the workstation: the daemon names its own address,
 *  the page may know it by another name (a LAN address, a host name). */
export function reachable(url, ws) {
  const u = new URL(url);
  if (ws?.kind === 'direct' && ws.url) u.hostname = new URL(ws.url).hostname;
  return u.toString();
}

/** The previews' own origin of the `relay serve` that served this page (its /healthz names
 *  the port), or null (a page served by a daemon, or a relay without one): asked until known. */
let previewOrigin = null;
export async function relayPreviewOrigin() {
  if (previewOrigin) return previewOrigin;
  try {
    const r = await fetch('/healthz', { cache: 'no-store' });
    const { relay, preview_port: port } = r.ok ? await r.json() : {};
    if (relay === true && Number.isInteger(port) && port > 0 && port < 65536) {
      previewOrigin = new URL(`${location.protocol}//${location.hostname}:${port}/`).origin;
    }
  } catch { /* offline, or not a page relay serve served */ }
  return previewOrigin;
}

/** The panel whose preview through the relay is shown: the previews' origin carries one at a
 *  time (its service worker answers the bootstrap that opened last). */
let shownRelay = null;

export class PreviewPanel {
  constructor(view) {
    this.view = view;
    this.button = h('button', {
      type: 'button', class: 'preview-btn', title: 'Preview the app a dev server serves',
      onclick: () => this.choose(),
    }, 'Preview');
    this.sheet = null;
    this.frame = null;
    this.current = null;
    this.origin = null; // through a relay: the previews' origin
    this.tunnel = null; // through a relay: net/preview-tunnel.js's RelayPreview
    this.port = null; // through a relay: the channel to the previews' origin's bootstrap
    this.onMessage = (ev) => this.fromOrigin(ev);
  }

  get viaRelay() {
    return this.view.ws?.kind === 'relay';
  }

  request(method, fields) {
    return this.view.app.client.request(method, fields);
  }

  /** The ports the session's processes listen on, any port typed, and the open previews. */
  async choose() {
    if (this.current) return this.showFrame();
    this.sheet?.remove();
    const list = h('div', { class: 'preview-ports', role: 'list' }, h('p', { class: 'muted small' }, 'Looking for dev servers…'));
    const port = h('input', {
      type: 'number', min: 1, max: 65535, inputmode: 'numeric', placeholder: '5173',
      class: 'preview-port', 'aria-label': 'Port',
    });
    const note = h('div', { class: 'preview-note', role: 'status' });
    const go = h('form', {
      class: 'preview-form',
      onsubmit: (ev) => { ev.preventDefault(); if (port.value) this.open(Number(port.value), note); },
    }, h('label', {}, 'Port on the workstation ', port), h('button', { type: 'submit', class: 'primary small-btn' }, 'Open'));
    this.sheet = h('div', { class: 'preview-sheet', role: 'dialog', 'aria-label': 'Preview' },
      h('div', { class: 'preview-sheet-head' }, h('strong', {}, 'Preview'),
        h('button', { type: 'button', class: 'link-btn', onclick: () => this.sheet.remove() }, 'Cancel')),
      list, go, note);
    this.view.el.querySelector('.session-head').after(this.sheet);
    let ports = [];
    try {
      ({ ports } = await this.request('preview.ports', { session: this.view.id }));
    } catch (err) {
      clear(list).append(h('p', { class: 'muted small' }, ...codeSpans(err.message)));
      return;
    }
    appendAll(clear(list), ports.length
      ? ports.map((p) => h('button', {
        type: 'button', class: 'preview-port-btn', role: 'listitem', dataset: { port: p.port },
        onclick: () => this.open(p.port, note),
      }, h('strong', {}, `localhost:${p.port}`), ' ', h('span', { class: 'muted small' }, p.command)))
      : [h('p', { class: 'muted small' }, 'No dev server of this session listens yet: type its port.')]);
  }

  async open(port, note) {
    if (this.viaRelay) {
      this.origin = await relayPreviewOrigin();
      if (!this.origin) {
        // its URL is the workstation's own address: not one this phone can reach through the relay
        clear(note).append(h('p', { class: 'error-text preview-relay-note' },
          'A preview through the relay needs the page agent-bridge relay serve serves (its '
          + 'previews\' own port): open that page, or the workstation\'s own page on its network.'));
        return;
      }
    }
    clear(note).append(h('p', { class: 'muted small' }, `Opening localhost:${port}…`));
    try {
      const { preview } = await this.request('preview.open', { session: this.view.id, port });
      this.current = preview;
    } catch (err) {
      appendAll(clear(note), [h('p', { class: 'error-text' }, ...codeSpans(err.message)),
        err.hint ? h('p', { class: 'muted small' }, ...codeSpans(err.hint)) : null]);
      return;
    }
    this.sheet?.remove();
    this.sheet = null;
    this.showFrame();
  }

  /** Full screen: the page, and a bar to reload it, go back to the session, or close it. */
  showFrame() {
    if (this.viaRelay && shownRelay !== this) {
      shownRelay?.dropFrame();
      shownRelay = this;
    }
    if (!this.frame) {
      this.iframe = h('iframe', {
        class: 'preview-frame', title: `Preview of localhost:${this.current.port}`,
        sandbox: SANDBOX, referrerpolicy: 'no-referrer', src: this.frameSrc(),
      });
      if (this.viaRelay) {
        const ws = this.view.ws;
        this.tunnel = new RelayPreview(this.current, () => ws.station?.sockets.find((s) => s.readyState === 1) || null);
        window.addEventListener('message', this.onMessage);
      }
      const btn = (label, cls, run) => h('button', { type: 'button', class: `small-btn ${cls}`, onclick: run }, label);
      this.frame = h('div', { class: 'preview-overlay', dataset: { preview: this.current.id } },
        h('div', { class: 'preview-bar' },
          btn('‹ Session', 'preview-back', () => this.hideFrame()),
          h('span', { class: 'preview-where' }, `localhost:${this.current.port}`),
          btn('Reload', 'preview-reload', () => this.reload()),
          btn('Close', 'danger preview-close', () => this.close())),
        this.iframe);
      document.body.append(this.frame);
    }
    this.frame.hidden = false;
    this.button.classList.add('active');
  }

  /** Where the frame opens: the preview's URL, or through a relay the bootstrap of the
   *  previews' origin (docs/protocol.md, "Preview through the relay"), made fresh each time so
   *  that its service worker knows it opened last. */
  frameSrc() {
    if (!this.viaRelay) return reachable(this.current.url, this.view.ws);
    return `${this.origin}/__agent-bridge/preview?at=${Date.now()}`;
  }

  /** The bootstrap on the previews' origin is ready: a port for its requests, and the path to
   *  show. Only from this panel's own frame and the previews' origin. */
  fromOrigin(ev) {
    if (!this.iframe || ev.source !== this.iframe.contentWindow || ev.origin !== this.origin) return;
    if (ev.data?.type === 'agent-bridge-preview-failed') {
      console.warn(`agent-bridge preview: the previews' origin could not start (${ev.data.reason})`);
      return;
    }
    if (ev.data?.type !== 'agent-bridge-preview-ready') return;
    const { port1, port2 } = new MessageChannel();
    const tunnel = this.tunnel;
    port1.onmessage = (msg) => {
      const [answer] = msg.ports;
      if (!answer) return;
      if (msg.data?.type === 'agent-bridge-fetch') tunnel.carry(msg.data, answer);
      else if (msg.data?.type === 'agent-bridge-ws') tunnel.carrySocket(msg.data, answer);
    };
    this.port?.close();
    this.port = port1;
    ev.source.postMessage({ type: 'agent-bridge-preview-port', path: this.startPath() }, this.origin, [port2]);
  }

  /** Loaded again from the preview's URL (this page cannot read a cross-origin frame's
   *  location, so the path given when it was opened). */
  reload() {
    if (this.port) {
      // through a relay: the previewed page again inside the previews' origin's frame
      this.port.postMessage({ type: 'agent-bridge-preview-show', path: this.startPath() });
      return;
    }
    this.iframe.src = 'about:blank';
    this.iframe.src = this.frameSrc();
  }

  startPath() {
    return new URL(this.current.url).searchParams.get('to') || '/';
  }

  hideFrame() {
    if (this.frame) this.frame.hidden = true;
  }

  /** The frame goes (another session's preview through the relay is shown); the preview
   *  stays open, and comes back with the Preview button. */
  dropFrame() {
    window.removeEventListener('message', this.onMessage);
    this.port?.close();
    this.port = null;
    this.frame?.remove();
    this.frame = null;
    this.button.classList.remove('active');
  }

  async close() {
    const id = this.current?.id;
    this.dropFrame();
    if (shownRelay === this) shownRelay = null;
    this.current = null;
    this.tunnel = null;
    if (id) await this.request('preview.close', { preview: id }).catch(() => {});
  }
}
