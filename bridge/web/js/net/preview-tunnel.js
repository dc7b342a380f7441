// A preview's requests carried through the relay (docs/protocol.md, "Preview through the
// relay"): the previews' own origin (served by `relay serve`) hands this page each request of
// the previewed page; this page writes it as HTTP/1.1 on a STREAM of its sealed relay
// connection to the daemon's preview proxy, and hands the answer back as it comes. The
// preview's secret cookie and the dev server's cookies are kept here, in memory, and never
// reach the previews' origin. `requestBytes` and `ResponseReader` are sans-I/O. The page's
// WebSockets to its own host (its live reload) are carried too (`carrySocket`,
// net/preview-socket.js).

import {
  FrameReader, OP, closePayload, concat, frameBytes, upgradeAnswer, upgradeBytes,
} from './preview-socket.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Headers of one hop, or ones this page sets itself: never taken from the previewed page. */
const OWN_HEADERS = new Set([
  'host', 'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'content-length', 'cookie', 'accept-encoding', 'expect',
]);
/** Answer headers the previewed page does not get (framing of this hop; cookies stay here). */
const HOP_ANSWER = new Set([
  'connection', 'keep-alive', 'transfer-encoding', 'trailer', 'upgrade', 'set-cookie',
  'set-cookie2', 'content-length',
]);
const MAX_HEAD = 64 * 1024;
/** Requests of one preview carried at once (a dev server's page may ask for hundreds of
 *  modules together; a relay connection takes 64 streams): the others wait their turn. */
const AT_ONCE = 16;
/** How a stream that a lost message or a lost connection ended says so: asked again once. */
const LOST = new Set(['gap', 'closed']);
/** The name of a preview's secret cookie begins so (`abpv_ID`, docs/protocol.md, "Preview"). */
const SECRET_PREFIX = 'abpv_';

function indexOfBlankLine(bytes, from = 0) {
  for (let i = Math.max(0, from - 3); i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) return i;
  }
  return -1;
}

/** One request as HTTP/1.1 bytes: one request per stream (`Connection: close`), no
 *  compression (a service worker's answer is not decoded again). */
export function requestBytes({ method, target, headers = [], body = null, cookie = '' }) {
  if (!/^[A-Z]{1,16}$/.test(method) || !/^\/[\x21-\x7e]*$/.test(target)) throw new Error('not a request a preview takes');
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: localhost', 'Connection: close', 'Accept-Encoding: identity'];
  for (const [name, value] of headers) {
    const n = String(name).toLowerCase();
    if (OWN_HEADERS.has(n) || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(n) || /[\r\n]/.test(value)) continue;
    lines.push(`${n}: ${value}`);
  }
  if (cookie) lines.push(`Cookie: ${cookie}`);
  const data = body ? new Uint8Array(body) : null;
  if (data || !['GET', 'HEAD', 'OPTIONS'].includes(method)) lines.push(`Content-Length: ${data ? data.length : 0}`);
  const head = encoder.encode(`${lines.join('\r\n')}\r\n\r\n`);
  return data ? concat(head, data) : head;
}

/**
 * An HTTP/1.1 answer read as its bytes come: `feed(bytes)` and `finish()` (the stream ended)
 * return events: {head: {status, statusText, headers: [[name, value]…], cookies: [text…]}},
 * {chunk: Uint8Array}, {end: true}, or {error: text}. Bodies framed by Content-Length, by
 * chunks, or by the stream's end.
 */
export class ResponseReader {
  constructor(method = 'GET') {
    this.method = method;
    this.buf = new Uint8Array(0);
    this.state = 'head'; // head | length | chunked | close | done
    this.left = 0; // bytes left of the body (length) or of the chunk (chunked)
    this.chunkState = 'size'; // size | data | crlf | trailer
  }

  feed(bytes) {
    const out = [];
    if (this.state === 'done') return out;
    this.buf = concat(this.buf, bytes);
    if (this.state === 'head') {
      const end = indexOfBlankLine(this.buf);
      if (end < 0) {
        if (this.buf.length > MAX_HEAD) return this.#fail(out, 'the answer\'s head is too large');
        return out;
      }
      const head = this.#head(decoder.decode(this.buf.subarray(0, end)));
      this.buf = this.buf.subarray(end + 4);
      if (!head) return this.#fail(out, 'not an HTTP answer');
      out.push({ head });
    }
    this.#body(out);
    return out;
  }

  finish() {
    if (this.state === 'done') return [];
    if (this.state === 'close') {
      this.state = 'done';
      return [{ end: true }];
    }
    return this.#fail([], 'the answer ended early');
  }

  #fail(out, error) {
    this.state = 'done';
    out.push({ error });
    return out;
  }

  #head(text) {
    const [line, ...rest] = text.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(line);
    if (!m) return null;
    const status = Number(m[1]);
    const headers = [];
    const cookies = [];
    let length = null;
    let chunked = false;
    for (const raw of rest) {
      const at = raw.indexOf(':');
      if (at <= 0) continue;
      const name = raw.slice(0, at).trim().toLowerCase();
      const value = raw.slice(at + 1).trim();
      if (name === 'content-length') length = Number(value);
      if (name === 'transfer-encoding') chunked = /chunked/i.test(value);
      if (name === 'set-cookie') cookies.push(value);
      if (!HOP_ANSWER.has(name)) headers.push([name, value]);
    }
    if (this.method === 'HEAD' || status < 200 || status === 204 || status === 304) {
      this.state = 'length';
      this.left = 0;
    } else if (chunked) {
      this.state = 'chunked';
    } else if (length !== null && Number.isSafeInteger(length) && length >= 0) {
      this.state = 'length';
      this.left = length;
    } else {
      this.state = 'close';
    }
    return { status, statusText: m[2] || '', headers, cookies };
  }

  #body(out) {
    if (this.state === 'close') {
      if (this.buf.length) out.push({ chunk: this.buf });
      this.buf = new Uint8Array(0);
    } else if (this.state === 'length') {
      const take = Math.min(this.left, this.buf.length);
      if (take) out.push({ chunk: this.buf.subarray(0, take) });
      this.left -= take;
      this.buf = this.buf.subarray(take);
      if (!this.left) {
        this.state = 'done';
        out.push({ end: true });
      }
    } else if (this.state === 'chunked') {
      this.#chunks(out);
    }
  }

  #chunks(out) {
    for (;;) {
      if (this.chunkState === 'data') {
        const take = Math.min(this.left, this.buf.length);
        if (take) out.push({ chunk: this.buf.subarray(0, take) });
        this.left -= take;
        this.buf = this.buf.subarray(take);
        if (this.left) return;
        this.chunkState = 'crlf';
      }
      const eol = this.buf.indexOf(10);
      if (eol < 0) {
        if (this.buf.length > 4096) this.#fail(out, 'a chunk\'s size line is too long');
        return;
      }
      const line = decoder.decode(this.buf.subarray(0, eol)).trim();
      this.buf = this.buf.subarray(eol + 1);
      if (this.chunkState === 'crlf') {
        this.chunkState = 'size';
      } else if (this.chunkState === 'size') {
        const size = parseInt(line.split(';')[0], 16);
        if (!Number.isSafeInteger(size) || size < 0) return void this.#fail(out, 'a chunk\'s size is not one');
        this.left = size;
        this.chunkState = size ? 'data' : 'trailer';
      } else if (!line) { // the trailer's blank line: the answer is whole
        this.state = 'done';
        out.push({ end: true });
        return;
      }
    }
  }
}

/** The dev server's cookies for one preview (what a browser would keep for its origin): name
 *  and value only, dropped when they expire at once. */
class CookieJar {
  constructor() {
    this.cookies = new Map();
  }

  take(setCookies) {
    for (const line of setCookies) {
      const [pair, ...attrs] = line.split(';');
      const at = pair.indexOf('=');
      if (at <= 0) continue;
      const name = pair.slice(0, at).trim();
      if (name.startsWith(SECRET_PREFIX)) continue; // the preview's secret is kept apart
      const gone = attrs.some((a) => /^\s*max-age\s*=\s*(0|-\d+)\s*$/i.test(a)
        || (/^\s*expires\s*=/i.test(a) && Date.parse(a.split('=').slice(1).join('=')) < Date.now()));
      if (gone) this.cookies.delete(name);
      else this.cookies.set(name, pair.slice(at + 1).trim());
    }
  }

  header() {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }
}

/**
 * One open preview reached through a relay workstation. `socket()` gives its open relay
 * connection (a RelaySocket, or null). `carry(message, port)` answers one request the
 * previews' origin sent (`{method, target, headers, body}`) on `port`.
 */
export class RelayPreview {
  constructor(preview, socket) {
    this.preview = preview;
    this.socket = socket;
    this.secret = ''; // `abpv_ID=KEY`, from the preview's URL once
    this.entering = null;
    this.jar = new CookieJar();
    this.active = 0;
    this.waiting = [];
  }

  /** The preview's secret as its cookie: its URL's `/__preview/KEY`, asked once (requests
   *  that come meanwhile wait for the same answer). */
  enter() {
    if (this.secret) return Promise.resolve();
    this.entering ??= this.#enter().finally(() => { this.entering = null; });
    return this.entering;
  }

  async #enter() {
    const url = new URL(this.preview.url);
    const { head } = await this.#exchange({ method: 'GET', target: url.pathname + url.search }, null);
    const cookie = head?.cookies.map((c) => c.split(';')[0]).find((c) => c.startsWith(SECRET_PREFIX));
    if (!cookie) throw new Error(`the preview did not open (${head ? head.status : 'no answer'})`);
    this.secret = cookie;
  }

  async carry(message, port) {
    const { method, target, headers, body } = message || {};
    await this.#turn();
    try {
      await this.enter();
      for (let attempt = 1; ; attempt++) {
        try {
          await this.#exchange({ method, target, headers, body }, port);
          break;
        } catch (err) {
          // lost before its answer began: a GET is asked again once, on a new stream
          if (!err.lost || attempt > 1 || !['GET', 'HEAD'].includes(method)) throw err;
        }
      }
    } catch (err) {
      port.postMessage({ error: String(err?.message || err) });
    } finally {
      this.#done();
    }
    port.close();
  }

  /**
   * A WebSocket of the previewed page to its own host (`{target, protocols}`), carried until
   * either side closes. To `port`: {open: {protocol}}, {message: text or ArrayBuffer}, then
   * {close: {code, reason, error}} once; from it: {send: text or ArrayBuffer}, {close: {code,
   * reason}}. It holds a stream, not a turn of the requests (a live reload's stays open).
   */
  async carrySocket(message, port) {
    let stream = null;
    let opened = false;
    let closed = false;
    let head = new Uint8Array(0);
    const reader = new FrameReader();
    const finish = (close) => {
      if (closed) return;
      closed = true;
      port.postMessage({ close });
      stream?.end();
      port.close();
    };
    const lost = (reason) => finish({ code: 1006, reason, error: true });
    const feed = (events) => {
      for (const ev of events) {
        if (closed) return;
        if ('text' in ev) port.postMessage({ message: ev.text });
        else if (ev.binary) {
          const data = ev.binary.slice().buffer;
          port.postMessage({ message: data }, [data]);
        } else if (ev.ping) stream.write(frameBytes(OP.PONG, ev.ping));
        else if (ev.close) {
          const code = ev.close.code === 1005 ? 1000 : ev.close.code;
          stream.write(frameBytes(OP.CLOSE, closePayload(code)));
          finish({ code: ev.close.code, reason: ev.close.reason });
        } else if (ev.error) lost(ev.error);
      }
    };
    port.onmessage = ({ data }) => {
      if (closed || !opened) return;
      if (typeof data?.send === 'string') stream.write(frameBytes(OP.TEXT, encoder.encode(data.send)));
      else if (data?.send instanceof ArrayBuffer) stream.write(frameBytes(OP.BINARY, new Uint8Array(data.send)));
      else if (data?.close) stream.write(frameBytes(OP.CLOSE, closePayload(data.close.code || 1000, data.close.reason || '')));
    };
    try {
      await this.enter();
      const ws = this.socket();
      if (!ws) throw new Error('the workstation cannot be reached now');
      const cookie = [this.secret, this.jar.header()].filter(Boolean).join('; ');
      const bytes = upgradeBytes({ target: message?.target, protocols: message?.protocols || [], cookie });
      stream = ws.openStream(this.preview.id, {
        ondata: (data) => {
          if (opened) return feed(reader.feed(data));
          head = concat(head, data);
          const answer = upgradeAnswer(head);
          if (!answer) return head.length > MAX_HEAD ? lost('the answer\'s head is too large') : undefined;
          if (answer.status !== 101) return lost(`the dev server answered ${answer.status}`);
          opened = true;
          port.postMessage({ open: { protocol: answer.protocol } });
          if (answer.rest.length) feed(reader.feed(answer.rest));
          return undefined;
        },
        onend: (error) => lost(error ? `the preview's stream ended: ${error}` : 'the dev server closed it'),
      });
      stream.write(bytes);
    } catch (err) {
      lost(String(err?.message || err));
    }
  }

  async #turn() {
    if (this.active < AT_ONCE) {
      this.active++;
      return;
    }
    await new Promise((go) => this.waiting.push(go)); // the one that ends hands its turn over
  }

  #done() {
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }

  /** One request on a stream of its own; its answer to `port` as it comes (or, without a
   *  port, the head, read whole). Resolves when the answer has ended. */
  #exchange(request, port) {
    const ws = this.socket();
    if (!ws) return Promise.reject(new Error('the workstation cannot be reached now'));
    const cookie = [this.secret, this.jar.header()].filter(Boolean).join('; ');
    const bytes = requestBytes({ ...request, cookie });
    const reader = new ResponseReader(request.method);
    return new Promise((resolve, reject) => {
      let head = null;
      let done = false;
      let stream = null;
      const finish = (events) => {
        for (const ev of events) {
          if (done) return;
          if (ev.head) {
            head = ev.head;
            this.jar.take(head.cookies);
            const { status, statusText, headers } = head;
            port?.postMessage({ head: { status, statusText, headers } });
          } else if (ev.chunk) {
            const chunk = ev.chunk.slice().buffer;
            port?.postMessage({ chunk }, [chunk]);
          } else {
            done = true;
            stream?.end();
            if (ev.error) {
              if (port && head) port.postMessage({ error: ev.error });
              else return reject(Object.assign(new Error(ev.error), { lost: !head && !!ev.lost }));
            } else port?.postMessage({ end: true });
            return resolve({ head });
          }
        }
      };
      if (port) {
        port.onmessage = ({ data }) => {
          if (data?.cancel && !done) finish([{ error: 'cancelled' }]);
        };
      }
      try {
        stream = ws.openStream(this.preview.id, {
          ondata: (data) => finish(reader.feed(data)),
          onend: (error) => finish(error && error !== 'ended'
            ? [{ error: `the preview's stream ended: ${error}`, lost: LOST.has(error) }]
            : reader.finish()),
        });
        stream.write(bytes);
      } catch (err) {
        reject(err);
      }
    });
  }
}
