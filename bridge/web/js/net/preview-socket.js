// A previewed page's WebSocket to its own host (a dev server's live reload) carried through the
// relay (docs/protocol.md, "The previews' origin"): the upgrade request on a STREAM of its
// own, then WebSocket frames both ways (RFC 6455: this page masks what it sends, as a browser
// does; the dev server's frames come unmasked), which the daemon's preview proxy splices to the
// dev server byte for byte. `upgradeBytes`, `frameBytes` and `FrameReader` are sans-I/O.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const OP = { CONTINUATION: 0, TEXT: 1, BINARY: 2, CLOSE: 8, PING: 9, PONG: 10 };
/** The most one message may hold (a live reload's are a few bytes). */
const MAX_MESSAGE = 16 * 1024 * 1024;

function b64(bytes) {
  return btoa(String.fromCharCode(...bytes));
}

/** The upgrade request: this page's Host, the page's sub-protocols, the preview's cookies. */
export function upgradeBytes({ target, protocols = [], cookie = '', key = b64(crypto.getRandomValues(new Uint8Array(16))) }) {
  if (!/^\/[\x21-\x7e]*$/.test(target)) throw new Error('not a path a preview takes');
  const lines = [`GET ${target} HTTP/1.1`, 'Host: localhost', 'Upgrade: websocket', 'Connection: Upgrade',
    `Sec-WebSocket-Key: ${key}`, 'Sec-WebSocket-Version: 13'];
  const wanted = protocols.map(String).filter((p) => /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(p));
  if (wanted.length) lines.push(`Sec-WebSocket-Protocol: ${wanted.join(', ')}`);
  if (cookie) lines.push(`Cookie: ${cookie}`);
  return encoder.encode(`${lines.join('\r\n')}\r\n\r\n`);
}

/** One whole frame as a client sends it: FIN, `opcode`, masked `payload` (Uint8Array). */
export function frameBytes(opcode, payload = new Uint8Array(0), mask = crypto.getRandomValues(new Uint8Array(4))) {
  const n = payload.length;
  const extra = n < 126 ? 0 : n < 65536 ? 2 : 8;
  const out = new Uint8Array(2 + extra + 4 + n);
  const view = new DataView(out.buffer);
  out[0] = 0x80 | opcode;
  if (extra === 0) out[1] = 0x80 | n;
  else if (extra === 2) {
    out[1] = 0x80 | 126;
    view.setUint16(2, n);
  } else {
    out[1] = 0x80 | 127;
    view.setBigUint64(2, BigInt(n));
  }
  out.set(mask, 2 + extra);
  const at = 2 + extra + 4;
  for (let i = 0; i < n; i++) out[at + i] = payload[i] ^ mask[i & 3];
  return out;
}

/** A close frame's payload: the code, then the reason (at most 123 bytes of it). */
export function closePayload(code, reason = '') {
  const text = encoder.encode(reason).subarray(0, 123);
  const out = new Uint8Array(2 + text.length);
  new DataView(out.buffer).setUint16(0, code);
  out.set(text, 2);
  return out;
}

/** Two byte arrays as one (`b` itself when `a` is empty). */
export function concat(a, b) {
  if (!a.length) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/**
 * The dev server's side read as it comes: `feed(bytes)` returns events: {text}, {binary:
 * Uint8Array}, {ping: payload}, {pong: payload}, {close: {code, reason}}, or {error} (not
 * WebSocket framing, or a message over 16 MiB: the socket is done).
 */
export class FrameReader {
  constructor() {
    this.buf = new Uint8Array(0);
    this.parts = [];
    this.partsSize = 0;
    this.partsOp = 0;
    this.failed = false;
  }

  feed(bytes) {
    const out = [];
    if (this.failed) return out;
    this.buf = concat(this.buf, bytes);
    for (;;) {
      const frame = this.#frame();
      if (!frame) return out;
      if (frame.error) {
        this.failed = true;
        out.push(frame);
        return out;
      }
      const ev = this.#event(frame);
      if (ev) out.push(ev);
      if (ev?.error) {
        this.failed = true;
        return out;
      }
    }
  }

  #frame() {
    const b = this.buf;
    if (b.length < 2) return null;
    const fin = (b[0] & 0x80) !== 0;
    const opcode = b[0] & 0x0f;
    const masked = (b[1] & 0x80) !== 0;
    let len = b[1] & 0x7f;
    let at = 2;
    const view = new DataView(b.buffer, b.byteOffset, b.length);
    if (len === 126) {
      if (b.length < 4) return null;
      len = view.getUint16(2);
      at = 4;
    } else if (len === 127) {
      if (b.length < 10) return null;
      const big = view.getBigUint64(2);
      if (big > BigInt(MAX_MESSAGE)) return { error: 'a WebSocket message too large for a preview' };
      len = Number(big);
      at = 10;
    }
    if (len > MAX_MESSAGE) return { error: 'a WebSocket message too large for a preview' };
    const maskAt = at;
    if (masked) at += 4;
    if (b.length < at + len) return null;
    let payload = b.slice(at, at + len);
    if (masked) payload = payload.map((x, i) => x ^ b[maskAt + (i & 3)]);
    this.buf = b.subarray(at + len);
    return { fin, opcode, payload };
  }

  #event({ fin, opcode, payload }) {
    if (opcode === OP.PING) return { ping: payload };
    if (opcode === OP.PONG) return { pong: payload };
    if (opcode === OP.CLOSE) {
      const code = payload.length >= 2 ? new DataView(payload.buffer, payload.byteOffset).getUint16(0) : 1005;
      return { close: { code, reason: decoder.decode(payload.subarray(2)) } };
    }
    if (opcode === OP.TEXT || opcode === OP.BINARY) {
      if (this.parts.length) return { error: 'a WebSocket message began inside another' };
      this.partsOp = opcode;
    } else if (opcode !== OP.CONTINUATION || !this.parts.length) {
      return { error: 'not WebSocket framing' };
    }
    this.parts.push(payload);
    this.partsSize += payload.length;
    if (this.partsSize > MAX_MESSAGE) return { error: 'a WebSocket message too large for a preview' };
    if (!fin) return null;
    const whole = this.parts.length === 1 ? this.parts[0] : this.parts.reduce(concat, new Uint8Array(0));
    const op = this.partsOp;
    this.parts = [];
    this.partsSize = 0;
    return op === OP.TEXT ? { text: decoder.decode(whole) } : { binary: whole };
  }
}

/** The answer to an upgrade: {status, protocol, rest} once its head is whole, else null. */
export function upgradeAnswer(bytes) {
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      const [line, ...headers] = decoder.decode(bytes.subarray(0, i)).split('\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(line)?.[1] || 0);
      const proto = headers.find((h) => /^sec-websocket-protocol:/i.test(h));
      return { status, protocol: proto ? proto.split(':')[1].trim() : '', rest: bytes.subarray(i + 4) };
    }
  }
  return null;
}
