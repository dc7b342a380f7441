// The cryptography of the relay wire format (docs/protocol.md, "Relay"), with no I/O in it, so
// that it can be checked against the daemon's test vectors in node as well as run in the page.
//
// Everything is NaCl through tweetnacl: crypto_box for pairing and for opening a virtual
// connection (long-term keys authenticate both ends), crypto_box_beforenm on fresh ephemeral
// keys for the connection key K (forward secrecy), crypto_secretbox for every frame. The
// nonce of a frame is made from its direction and counter, so a counter is never reused
// under one K and a replayed or reordered frame is recognised by its counter alone.

export const DIR_UP = 0x43; // 'C': client -> daemon
export const DIR_DOWN = 0x44; // 'D': daemon -> client
export const KIND = { FRAME: 0, MORE: 1, CLOSE: 2, KEEPALIVE: 3, BATCH: 4, STREAM: 5 };
/** The most plaintext one message may carry: 1 kind byte + a piece of a frame. */
export const MAX_PLAINTEXT = 256 * 1024;
export const OPEN_MAX_SKEW_S = 300;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export class RelayError extends Error {
  constructor(code, message) {
    super(message || code);
    this.code = code;
  }
}

// ---- base64url without padding ------------------------------------------------------------------

export function b64encode(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export function b64decode(text) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text)) {
    throw new RelayError('bad_b64', 'not base64url');
  }
  const plain = text.replace(/-/g, '+').replace(/_/g, '/');
  const bin = atob(plain + '='.repeat((4 - (plain.length % 4)) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function jsonBytes(value) {
  return encoder.encode(JSON.stringify(value));
}

function parseJson(bytes) {
  return JSON.parse(decoder.decode(bytes));
}

function hex(bytes) {
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// ---- the pairing link ---------------------------------------------------------------------------

/** The workstation a `#relay=<b64 JSON>` fragment describes; throws RelayError if malformed. */
export function parseLink(fragmentValue) {
  let link;
  try {
    link = parseJson(b64decode(fragmentValue));
  } catch {
    throw new RelayError('bad_link', 'this is not an agent-bridge relay pairing link: `agent-bridge pair --relay` on the workstation prints one');
  }
  const ok = link && link.v === 1 && typeof link.host === 'string' && /^[a-z0-9-]{1,40}$/.test(link.host)
    && typeof link.url === 'string' && /^wss?:\/\//.test(link.url)
    && typeof link.pk === 'string' && typeof link.secret === 'string';
  if (!ok) throw new RelayError('bad_link', 'the pairing link is incomplete or of another version');
  const pk = b64decode(link.pk);
  const secret = b64decode(link.secret);
  if (pk.length !== 32 || secret.length !== 32) throw new RelayError('bad_link', 'the pairing link has bad keys');
  return {
    name: typeof link.name === 'string' && link.name ? link.name : link.host,
    host: link.host,
    url: link.url,
    user: typeof link.user === 'string' ? link.user : null,
    pass: typeof link.pass === 'string' ? link.pass : null,
    // a bearer user JWT instead of user/pass (a hosted NATS's operator/JWT accounts)
    jwt: typeof link.jwt === 'string' && link.jwt ? link.jwt : null,
    pk: link.pk,
    secret: link.secret,
    // a relay on several machines: every node's WebSocket, where the page goes when one is down
    urls: otherUrls(link),
  };
}

/** The nodes' WebSocket URLs a link (or the record made from it) lists besides `url`. */
export function otherUrls(x) {
  if (!Array.isArray(x?.urls)) return [];
  return x.urls.filter((u) => typeof u === 'string' && /^wss?:\/\//.test(u) && u !== x.url).slice(0, 16);
}

// ---- pairing and opening ------------------------------------------------------------------------

function loginOf(value) {
  return value && typeof value.user === 'string' && value.user && typeof value.pass === 'string'
    ? { user: value.user, pass: value.pass }
    : null;
}

export class RelayCrypto {
  /** `nacl` is tweetnacl (nacl-fast.js); passed in so node and the page load it their own way. */
  constructor(nacl) {
    this.nacl = nacl;
  }

  keyPair() {
    const kp = this.nacl.box.keyPair();
    return { pk: b64encode(kp.publicKey), sk: b64encode(kp.secretKey) };
  }

  /** The `P.pair` request for `link` from the client key pair `keys` ({pk, sk} in b64). */
  pairRequest(link, keys, clientName, nonce = this.nacl.randomBytes(24)) {
    const inner = jsonBytes({ secret: link.secret, name: clientName });
    const box = this.nacl.box(inner, nonce, b64decode(link.pk), b64decode(keys.sk));
    return { v: 1, pk: keys.pk, n: b64encode(nonce), box: b64encode(box) };
  }

  /** The client id from the daemon's pair reply; throws RelayError when refused or forged. */
  pairReply(reply, daemonPk, keys) {
    return this.pairResult(reply, daemonPk, keys).clientId;
  }

  /**
   * What the daemon's pair reply holds: {clientId, login}, where login is this client's own
   * NATS user ({user, pass}) on a relay that gives it one, else null.
   */
  pairResult(reply, daemonPk, keys) {
    if (!reply || reply.ok !== true) throw new RelayError(reply?.error || 'bad_reply', `pairing refused: ${reply?.error || 'bad reply'}`);
    const inner = this.#unbox(reply, daemonPk, keys.sk);
    if (typeof inner.client_id !== 'string' || !inner.client_id) throw new RelayError('bad_reply', 'no client id in the pairing reply');
    return { clientId: inner.client_id, login: loginOf(inner.login) };
  }

  /** A `P.login` request: a paired client asks for its own NATS user. */
  loginRequest(daemonPk, keys, { nowS = Math.floor(Date.now() / 1000), nonce } = {}) {
    const n = nonce || this.nacl.randomBytes(24);
    const box = this.nacl.box(jsonBytes({ login: true, ts: nowS }), n, b64decode(daemonPk), b64decode(keys.sk));
    return { v: 1, pk: keys.pk, n: b64encode(n), box: b64encode(box) };
  }

  /**
   * A message for the relay's work queue (docs/protocol.md, "The relay's work queue"): `send`
   * ({session, text, attachments, client_msg_id}) sealed to the daemon's long-term key.
   */
  queuedMessage(daemonPk, keys, clientId, send, { nowS = Math.floor(Date.now() / 1000), nonce } = {}) {
    const n = nonce || this.nacl.randomBytes(24);
    const inner = jsonBytes({ client_id: clientId, ts: nowS, send });
    const box = this.nacl.box(inner, n, b64decode(daemonPk), b64decode(keys.sk));
    return { v: 1, pk: keys.pk, n: b64encode(n), box: b64encode(box) };
  }

  /**
   * A client's queue token on `relay serve` (bridge/relay/permissions.py): 128 bits of SHA-512
   * of "agent-bridge queue " and its own NATS password, in hex. Its queue subject is
   * P.q.<token>.<client id>: no other phone can name it, not even as a reply subject.
   */
  queueToken(password) {
    return hex(this.nacl.hash(new TextEncoder().encode(`agent-bridge queue ${password}`))).slice(0, 32);
  }

  /** {clientId, login} from the daemon's login reply; throws RelayError (its code) otherwise. */
  loginReply(reply, daemonPk, keys) {
    if (!reply || reply.ok !== true) throw new RelayError(reply?.error || 'bad_reply', `no login: ${reply?.error || 'bad reply'}`);
    const inner = this.#unbox(reply, daemonPk, keys.sk);
    const login = loginOf(inner.login);
    if (typeof inner.client_id !== 'string' || !login) throw new RelayError('bad_reply', 'no login in the reply');
    return { clientId: inner.client_id, login };
  }

  /**
   * A `P.open` request and the state needed to check its reply. `eph` (a nacl box key pair) and
   * `conn` may be given by a test; a real open makes fresh ones.
   */
  openRequest(daemonPk, keys, { nowS = Math.floor(Date.now() / 1000), eph, conn, nonce, clientId } = {}) {
    const e = eph || this.nacl.box.keyPair();
    const id = conn || hex(this.nacl.randomBytes(16));
    const n = nonce || this.nacl.randomBytes(24);
    const ephB64 = b64encode(e.publicKey);
    // A client with its own NATS user names itself: its subjects are P.vc.<client id>.<conn>.*
    const named = clientId ? { client_id: clientId } : {};
    // batch: the daemon may send a burst of frames as BATCH messages (Opener takes them)
    const inner = jsonBytes({ conn: id, eph: ephB64, ts: nowS, ...named, batch: true });
    const box = this.nacl.box(inner, n, b64decode(daemonPk), b64decode(keys.sk));
    return {
      request: { v: 1, pk: keys.pk, conn: id, eph: ephB64, n: b64encode(n), box: b64encode(box), ...named },
      state: { conn: id, eph: e },
    };
  }

  /** Checks the daemon's open reply (this authenticates the daemon) and returns K. */
  openReply(reply, daemonPk, keys, state) {
    if (!reply || reply.ok !== true) throw new RelayError(reply?.error || 'bad_reply', `the daemon refused the connection: ${reply?.error || 'bad reply'}`);
    const inner = this.#unbox(reply, daemonPk, keys.sk);
    const ownEph = b64encode(state.eph.publicKey);
    if (inner.conn !== state.conn || inner.eph !== reply.eph || inner.client_eph !== ownEph) {
      throw new RelayError('bad_reply', 'the open reply does not match the request');
    }
    const peer = b64decode(reply.eph);
    if (peer.length !== 32) throw new RelayError('bad_reply', 'bad ephemeral key');
    return this.nacl.box.before(peer, state.eph.secretKey);
  }

  #unbox(reply, peerPk, ownSk) {
    let opened = null;
    try {
      opened = this.nacl.box.open(b64decode(reply.box), b64decode(reply.n), b64decode(peerPk), b64decode(ownSk));
    } catch {
      opened = null;
    }
    if (!opened) throw new RelayError('bad_box', 'the reply is not from this workstation');
    try {
      return parseJson(opened);
    } catch {
      throw new RelayError('bad_reply', 'the reply is not JSON');
    }
  }
}

// ---- sealed frames ------------------------------------------------------------------------------

function nonceFor(direction, counter) {
  const nonce = new Uint8Array(24);
  nonce[0] = direction;
  new DataView(nonce.buffer).setBigUint64(16, BigInt(counter));
  return nonce;
}

function framesOf(body) {
  const frames = [];
  const view = new DataView(body.buffer, body.byteOffset, body.length);
  let at = 0;
  while (at + 4 <= body.length) {
    const size = view.getUint32(at);
    at += 4;
    if (size > body.length - at) break; // the daemon never sends one that does not add up
    const one = textOf(body.subarray(at, at + size));
    if (one) frames.push(one.frame);
    at += size;
  }
  return frames;
}

function textOf(bytes) {
  try {
    return { frame: decoder.decode(bytes) };
  } catch {
    return null; // not UTF-8: no frame of ours
  }
}

/** One direction's sender: counters from 1, each message sealed under K. */
export class Sealer {
  constructor(nacl, key, direction = DIR_UP) {
    this.nacl = nacl;
    this.key = key;
    this.direction = direction;
    this.counter = 0;
  }

  seal(kind, body = new Uint8Array(0)) {
    const plain = new Uint8Array(1 + body.length);
    plain[0] = kind;
    plain.set(body, 1);
    this.counter += 1;
    const nonce = nonceFor(this.direction, this.counter);
    const box = this.nacl.secretbox(plain, nonce, this.key);
    const out = new Uint8Array(8 + box.length);
    out.set(nonce.subarray(16), 0);
    out.set(box, 8);
    return out;
  }

  /** The messages that carry one protocol frame (a JSON string): MORE pieces, then a FRAME. */
  sealFrame(text) {
    const bytes = encoder.encode(text);
    const piece = MAX_PLAINTEXT - 1;
    const out = [];
    let at = 0;
    while (bytes.length - at > piece) {
      out.push(this.seal(KIND.MORE, bytes.subarray(at, at + piece)));
      at += piece;
    }
    out.push(this.seal(KIND.FRAME, bytes.subarray(at)));
    return out;
  }

  sealClose(code, reason) {
    return this.seal(KIND.CLOSE, jsonBytes({ code, reason }));
  }
}

/**
 * One direction's receiver. `open(message)` returns what the message means:
 * {frame: text} for a complete protocol frame, {frames: [text, …]} for a BATCH,
 * {close: {code, reason}}, {keepalive: true}, {stream: body} (a preview's STREAM message), or
 * null for a piece of a frame still being joined (or a frame dropped at a gap). A replayed,
 * reordered or forged message throws RelayError('frame_rejected'): the connection is done.
 */
export class Opener {
  constructor(nacl, key, direction = DIR_DOWN) {
    this.nacl = nacl;
    this.key = key;
    this.direction = direction;
    this.last = 0n;
    this.pieces = [];
    this.broken = false; // a gap fell inside the frame being joined: drop it at its end
    this.gap = false; // the last message opened came after lost ones (a preview's streams end)
  }

  open(message) {
    if (!(message instanceof Uint8Array) || message.length < 8 + 16 + 1) {
      throw new RelayError('frame_rejected', 'short message');
    }
    const counter = new DataView(message.buffer, message.byteOffset, 8).getBigUint64(0);
    if (counter <= this.last) throw new RelayError('frame_rejected', `counter ${counter} after ${this.last}`);
    const plain = this.nacl.secretbox.open(message.subarray(8), nonceFor(this.direction, counter), this.key);
    if (!plain || plain.length < 1) throw new RelayError('frame_rejected', 'bad MAC');
    // Lost messages may have held the start of the frame this one belongs to: drop that frame.
    this.gap = counter !== this.last + 1n;
    if (this.gap) this.broken = true;
    this.last = counter;
    const kind = plain[0];
    const body = plain.subarray(1);
    switch (kind) {
      case KIND.MORE:
        this.pieces.push(body);
        return null;
      case KIND.FRAME: {
        const pieces = this.pieces;
        const broken = this.broken;
        this.pieces = [];
        this.broken = false;
        if (broken) return null;
        if (!pieces.length) return textOf(body);
        const total = pieces.reduce((n, p) => n + p.length, body.length);
        const joined = new Uint8Array(total);
        let at = 0;
        for (const p of [...pieces, body]) {
          joined.set(p, at);
          at += p.length;
        }
        return textOf(joined);
      }
      case KIND.CLOSE: {
        let close = { code: 1000, reason: '' };
        try {
          const c = parseJson(body);
          close = { code: Number(c.code) || 1000, reason: String(c.reason || '') };
        } catch { /* a close is a close, whatever its body */ }
        return { close };
      }
      case KIND.KEEPALIVE:
        return { keepalive: true };
      case KIND.BATCH: {
        // whole frames, each after its 4-byte big-endian length; a frame being joined lost
        // its end to a gap (a batch never falls inside one)
        this.pieces = [];
        this.broken = false;
        return { frames: framesOf(body) };
      }
      case KIND.STREAM:
        return { stream: body };
      default:
        return null; // a kind from a later revision: ignored, like unknown protocol frames
    }
  }
}
