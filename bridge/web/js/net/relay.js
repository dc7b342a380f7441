// The client side of the end-to-end encrypted relay (docs/protocol.md, "Relay"): a workstation
// whose daemon dials out to a NATS server, reached from the page over NATS's WebSocket listener.
// The relay only ever sees sealed bytes; the keys live in this browser.
//
// - RelayStation: one paired workstation and its NATS connection (shared by its virtual
//   connections), its liveness (`P.status`), pairing from a `#relay=` link. On a relay that
//   gives each client its own NATS user (`relay serve`), the station connects with that user
//   (from the pair reply, or asked for with `P.login` by a browser paired before) and uses the
//   subjects that name this client; elsewhere, with the link's shared login, as before.
// - RelaySocket: one virtual connection that behaves like the page's WebSocket to the daemon
//   (send(text), close(code, reason), onopen / onmessage({data}) / onclose({code, reason})), so
//   protocol.js runs every feature over it unchanged. Each open makes fresh ephemeral keys;
//   60 s of silence closes it and protocol.js reopens a new one and re-subscribes from the last
//   seq it showed. A message that does not authenticate (forged, replayed, reordered, short:
//   anyone holding the relay's client login can publish one) is dropped and counted, and
//   changes nothing: only what the daemon itself sealed (its CLOSE) closes the connection.
//   It also carries a preview's byte streams (`openStream`: STREAM messages, docs/protocol.md,
//   "Preview through the relay"), sealed like every frame.

import { connect, jwtAuthenticator } from '../../vendor/nats.ws/nats.js';
import '../../vendor/tweetnacl/nacl-fast.js';
import {
  DIR_DOWN, DIR_UP, KIND, MAX_PLAINTEXT, Opener, RelayCrypto, RelayError, Sealer, otherUrls, parseLink,
} from './relay-crypto.js';

// nacl-fast.js is a classic UMD file: loaded as a module it puts itself on globalThis.
const nacl = globalThis.nacl;
const crypto = new RelayCrypto(nacl);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export const KEEPALIVE_IDLE_MS = 20_000;
export const SILENCE_MS = 60_000;
const REQUEST_TIMEOUT_MS = 10_000;
const TICK_MS = 2_000;
/** Messages kept while an open is answered; more before the key is known are dropped. */
const MAX_EARLY = 64;
/** At most one console line a this long about dropped messages (anyone can send them). */
const DROP_LOG_MS = 10_000;
/** A STREAM message's ops, and the most data one carries (kind byte, stream and op aside). */
const STREAM_OP = { OPEN: 1, DATA: 2, END: 3 };
const STREAM_DATA = MAX_PLAINTEXT - 1 - 5;
/** The streams one connection may have open (the daemon ends a 65th with `too_many`). */
const MAX_STREAMS = 64;

/**
 * Close codes a RelaySocket reports besides the daemon's own (4401: not paired or revoked).
 * They are local (never on the wire) and all mean "try again later".
 */
export const CLOSE = {
  RELAY_DOWN: 4100, // the NATS server cannot be reached
  OFFLINE: 4101, // the relay is up but the daemon does not answer
  REJECTED: 4102, // the daemon's answer to an open does not check out, or refuses it
  SILENT: 4103, // nothing received for 60 s
};

export { parseLink, RelayError };

function json(value) {
  return encoder.encode(JSON.stringify(value));
}

function isNoResponders(err) {
  return err?.code === '503' || /no responders/i.test(String(err?.message));
}

function isTimeout(err) {
  return err?.code === 'TIMEOUT' || /timeout/i.test(String(err?.message));
}

function isAuthError(err) {
  return err?.code === 'AUTHORIZATION_VIOLATION' || /authorization/i.test(String(err?.message));
}

/** What went wrong in a request to the relay, as a close code and a reason a person can read. */
function classify(err) {
  if (err instanceof RelayError) {
    if (['unknown_client', 'revoked'].includes(err.code)) {
      return { code: 4401, reason: err.code === 'revoked' ? 'this browser was revoked on the workstation' : 'this browser is not paired with the workstation' };
    }
    return { code: CLOSE.REJECTED, reason: err.message };
  }
  if (isNoResponders(err) || isTimeout(err)) return { code: CLOSE.OFFLINE, reason: 'the workstation is offline, or its daemon cannot reach the relay (one that does not trust the relay\'s certificate cannot): `agent-bridge doctor` there says which' };
  // Neither this browser's own login nor the pairing login works any more (revoked, rotated).
  if (isAuthError(err)) return { code: 4401, reason: 'the relay refused this browser\'s login: pair again' };
  return { code: CLOSE.RELAY_DOWN, reason: `the relay cannot be reached (${err?.message || err})` };
}

/** The login a link (or the record made from it) gives every phone of the workstation. */
function sharedLogin(x) {
  return { user: x.user, pass: x.pass, jwt: x.jwt };
}

/**
 * A NATS connection to the workstation's relay as `login` ({user, pass}, or {jwt}: a bearer
 * user JWT, which needs no key to sign with). Replies come back
 * under `agent-bridge.<host>._INBOX.<inbox>` (`pair` for the pairing login, the client id for
 * the client's own user), so the relay's permissions can confine each user to its own.
 */
async function natsConnect(where, login, inbox) {
  const { url, host } = where;
  return connect({
    // the link's node first, then the cluster's others (nats.ws goes on to the next one)
    servers: [url, ...otherUrls(where)],
    user: login?.user || undefined,
    pass: login?.pass || undefined,
    authenticator: login?.jwt ? jwtAuthenticator(login.jwt) : undefined,
    name: 'agent-bridge web',
    inboxPrefix: `agent-bridge.${host}._INBOX.${inbox}`,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 2_000,
    timeout: REQUEST_TIMEOUT_MS,
  });
}

/**
 * Pair this browser with the workstation of a `#relay=` link. Resolves with the record to keep
 * (it holds this browser's secret key: it stays in this browser's storage).
 */
export async function pair(linkValue, clientName) {
  const link = typeof linkValue === 'string' ? parseLink(linkValue) : linkValue;
  const keys = crypto.keyPair();
  const nc = await natsConnect(link, sharedLogin(link), 'pair');
  try {
    let reply;
    try {
      const msg = await nc.request(`agent-bridge.${link.host}.pair`, json(crypto.pairRequest(link, keys, clientName)),
        { timeout: REQUEST_TIMEOUT_MS });
      reply = JSON.parse(decoder.decode(msg.data));
    } catch (err) {
      if (isNoResponders(err) || isTimeout(err)) throw new RelayError('offline', 'the workstation is offline: start its daemon and try again (if it runs, `agent-bridge doctor` there says why it cannot reach the relay, such as a relay certificate it does not trust)');
      throw err;
    }
    const { clientId, login } = crypto.pairResult(reply, link.pk, keys);
    return {
      kind: 'relay',
      id: `relay:${link.host}`,
      name: link.name,
      host: link.host,
      url: link.url,
      urls: link.urls,
      user: link.user,
      pass: link.pass,
      jwt: link.jwt,
      pk: link.pk,
      keys,
      client_id: clientId,
      // this browser's own NATS user (`relay serve`); null: the link's shared login it is
      login,
      paired_at: new Date().toISOString(),
    };
  } finally {
    nc.close().catch(() => {});
  }
}

/**
 * A paired workstation. Events: 'relay' with detail {state} ('connecting' | 'up' | 'down')
 * when the NATS connection changes; 'record' when the record changed (it got its own login)
 * and should be kept again.
 */
export class RelayStation extends EventTarget {
  #nc = null;
  #connecting = null;
  #sockets = new Set();
  /** The relay gives no client its own user (`P.login` said so): the shared login it is. */
  #shared = false;
  /** The connection is this client's own user's: subjects name the client. */
  scoped = false;

  /** `timing` changes the liveness intervals (tests): {keepaliveMs, silenceMs, tickMs}. */
  constructor(record, timing = {}) {
    super();
    this.record = record;
    this.prefix = `agent-bridge.${record.host}`;
    this.relayState = 'down';
    /** Messages dropped on this workstation's connections because they did not authenticate. */
    this.dropped = 0;
    this.lastDropLog = -Infinity;
    this.timing = { keepaliveMs: KEEPALIVE_IDLE_MS, silenceMs: SILENCE_MS, tickMs: TICK_MS, ...timing };
  }

  /** The virtual connections open now (for the tests and the curious). */
  get sockets() {
    return [...this.#sockets];
  }

  /** A WebSocket-like object for protocol.js (its `transport`). */
  socket() {
    return new RelaySocket(this);
  }

  /** Is the daemon there? true, false (relay up, daemon silent); throws when the relay is down. */
  async status() {
    const nc = await this.connection();
    try {
      await nc.request(`${this.prefix}.status`, json({ v: 1 }), { timeout: REQUEST_TIMEOUT_MS });
      return true;
    } catch (err) {
      if (isNoResponders(err) || isTimeout(err)) return false;
      throw err;
    }
  }

  /**
   * Leave `send` ({session, text, attachments, client_msg_id}) on the relay's work queue for a
   * daemon that is away. Resolves once JetStream has stored it; throws RelayError: 'no_queue'
   * (this relay keeps none), 'queue_full' (its bounds: the message stays in the outbox), or
   * 'too_large' (over what the relay takes in one message).
   */
  async enqueue(send) {
    const nc = await this.connection();
    const { record } = this;
    const data = json(crypto.queuedMessage(record.pk, record.keys, record.client_id, send));
    if (nc.info?.max_payload && data.length > nc.info.max_payload) {
      throw new RelayError('too_large', 'too large to wait on the relay');
    }
    let reply;
    try {
      // with its own user (`relay serve`), on the subject only it can name (its token)
      const subject = this.scoped && record.login?.pass
        ? `${this.prefix}.q.${crypto.queueToken(record.login.pass)}.${record.client_id}`
        : `${this.prefix}.q.${record.client_id}`;
      const msg = await nc.request(subject, data, { timeout: REQUEST_TIMEOUT_MS });
      reply = JSON.parse(decoder.decode(msg.data));
    } catch (err) {
      if (isNoResponders(err)) throw new RelayError('no_queue', 'this relay keeps no queue');
      throw err;
    }
    if (reply?.error) throw new RelayError('queue_full', reply.error.description || 'the relay refused it');
    if (typeof reply?.seq !== 'number') throw new RelayError('bad_reply', 'the relay did not say it kept it');
    return reply.seq;
  }

  async connection() {
    if (this.#nc) return this.#nc;
    if (!this.#connecting) {
      this.#setState('connecting');
      this.#connecting = this.#dial().then((nc) => {
        this.#nc = nc;
        this.#setState('up');
        this.#watch(nc);
        return nc;
      }).catch((err) => {
        this.#setState('down');
        throw err;
      }).finally(() => {
        this.#connecting = null;
      });
    }
    return this.#connecting;
  }

  /** The NATS connection: as this client's own user when it has one (asked for when not). */
  async #dial() {
    const { record } = this;
    if (record.login) {
      try {
        const nc = await natsConnect(record, record.login, record.client_id);
        this.scoped = true;
        return nc;
      } catch (err) {
        // Refused (its user is gone: revoked, or a relay that lost it): ask the daemon again.
        if (!isAuthError(err)) throw err;
      }
    }
    const nc = await natsConnect(record, sharedLogin(record), 'pair');
    this.scoped = false;
    if (this.#shared) return nc;
    let login;
    try {
      const msg = await nc.request(`${this.prefix}.login`, json(crypto.loginRequest(record.pk, record.keys)),
        { timeout: REQUEST_TIMEOUT_MS });
      const reply = JSON.parse(decoder.decode(msg.data));
      if (reply?.ok !== true && reply?.error === 'unsupported') {
        this.#shared = true;
        return nc;
      }
      login = crypto.loginReply(reply, record.pk, record.keys).login;
    } catch (err) {
      // A hosted NATS whose operator did not allow `P.login`: refused, or dropped unanswered.
      if (isTimeout(err) || err?.code === 'PERMISSIONS_VIOLATION' || /permissions violation/i.test(String(err?.message))) {
        this.#shared = true;
        return nc;
      }
      nc.close().catch(() => {});
      throw err;
    }
    nc.close().catch(() => {});
    record.login = login;
    this.dispatchEvent(new CustomEvent('record'));
    const own = await natsConnect(record, login, record.client_id);
    this.scoped = true;
    return own;
  }

  close() {
    for (const s of [...this.#sockets]) s.close(1000, 'bye');
    const nc = this.#nc;
    this.#nc = null;
    if (nc) nc.close().catch(() => {});
    this.#setState('down');
  }

  attach(socket) {
    this.#sockets.add(socket);
  }

  /** A message dropped unauthenticated: counted, and told on the console at a bounded rate. */
  noteDropped(why) {
    this.dropped++;
    const now = Date.now();
    if (now - this.lastDropLog < DROP_LOG_MS) return;
    this.lastDropLog = now;
    console.warn(`agent-bridge relay: dropped a message that did not authenticate (${why}); ${this.dropped} so far`);
  }

  detach(socket) {
    this.#sockets.delete(socket);
  }

  #setState(state) {
    if (this.relayState === state) return;
    this.relayState = state;
    this.dispatchEvent(new CustomEvent('relay', { detail: { state } }));
  }

  async #watch(nc) {
    nc.closed().then(() => {
      if (this.#nc === nc) this.#nc = null;
      this.#setState('down');
      for (const s of [...this.#sockets]) s.lose(CLOSE.RELAY_DOWN, 'the relay connection closed');
    });
    try {
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') {
          this.#setState('down');
          // Frames sent meanwhile would be lost or late: start over once the relay is back.
          for (const sock of [...this.#sockets]) sock.lose(CLOSE.RELAY_DOWN, 'the relay connection dropped');
        } else if (s.type === 'reconnect') {
          // An open asked while the relay was away waits for its 10 s timeout: ask again now.
          for (const sock of [...this.#sockets]) {
            if (sock.readyState === 0) sock.lose(CLOSE.RELAY_DOWN, 'the relay is back: opening again');
          }
          this.#setState('up');
        }
      }
    } catch { /* the iterator ends with the connection */ }
  }
}

/** One virtual connection; see the file's head. readyState follows WebSocket's numbers. */
export class RelaySocket {
  #station;
  #sealer = null;
  #opener = null;
  #sub = null;
  #nc = null;
  #early = [];
  #tick = null;
  #lastSent = 0;
  #lastHeard = 0;
  #subjectUp = '';
  #streams = new Map(); // stream number -> {ondata, onend}
  #nextStream = 1;

  constructor(station) {
    this.#station = station;
    this.readyState = 0;
    this.onopen = null;
    this.onmessage = null;
    this.onclose = null;
    this.onerror = null;
    /** What happened, for the tests and the curious: counts of messages and rejects. */
    this.stats = { sent: 0, received: 0, keepalivesSent: 0, dropped: 0, conn: null };
    station.attach(this);
    this.#start();
  }

  async #start() {
    const station = this.#station;
    const { record } = station;
    try {
      const nc = await station.connection();
      if (this.readyState !== 0) return;
      this.#nc = nc;
      const clientId = station.scoped ? record.client_id : undefined;
      const { request, state } = crypto.openRequest(record.pk, record.keys, { clientId });
      this.stats.conn = state.conn;
      const vc = clientId ? `${station.prefix}.vc.${clientId}.${state.conn}` : `${station.prefix}.vc.${state.conn}`;
      this.#subjectUp = `${vc}.up`;
      // Listen before asking, so the daemon's first frame cannot arrive unheard.
      this.#sub = nc.subscribe(`${vc}.down`, {
        callback: (err, msg) => { if (!err) this.#onMessage(msg.data); },
      });
      const msg = await nc.request(`${station.prefix}.open`, json(request), { timeout: REQUEST_TIMEOUT_MS });
      if (this.readyState !== 0) return;
      const key = crypto.openReply(JSON.parse(decoder.decode(msg.data)), record.pk, record.keys, state);
      this.#sealer = new Sealer(nacl, key, DIR_UP);
      this.#opener = new Opener(nacl, key, DIR_DOWN);
      this.readyState = 1;
      this.#lastSent = Date.now();
      this.#lastHeard = Date.now();
      this.#tick = setInterval(() => this.#onTick(), station.timing.tickMs);
      this.onopen?.({ type: 'open' });
      for (const early of this.#early.splice(0)) this.#onMessage(early);
    } catch (err) {
      const { code, reason } = classify(err);
      this.lose(code, reason);
    }
  }

  send(text) {
    if (this.readyState !== 1) throw new Error('the relay connection is not open');
    for (const message of this.#sealer.sealFrame(text)) this.#publish(message);
  }

  close(code = 1000, reason = '') {
    if (this.readyState === 1) {
      try {
        this.#publish(this.#sealer.sealClose(code, reason));
      } catch { /* the relay is gone anyway */ }
    }
    this.lose(code, reason);
  }

  /**
   * A byte stream to open preview `previewId` (its proxy gets what `write` sends, as a
   * browser's TCP connection to the preview would carry it). `ondata(bytes)` gets the answer's
   * bytes in order; `onend(error)` once (error null, or a code: `not_found`, `too_many`, `gap`,
   * `closed`, …). Returns {write(bytes), end()}; throws when the connection is not open.
   */
  openStream(previewId, { ondata, onend }) {
    if (this.readyState !== 1) throw new Error('the relay connection is not open');
    if (this.#streams.size >= MAX_STREAMS) throw new Error('too many preview requests at once');
    const id = this.#nextStream;
    this.#nextStream = id >= 0xffffffff ? 1 : id + 1;
    this.#streams.set(id, { ondata, onend });
    this.#sendStream(id, STREAM_OP.OPEN, json({ preview: previewId }));
    return {
      write: (bytes) => {
        if (!this.#streams.has(id) || this.readyState !== 1) return;
        for (let at = 0; at < bytes.length; at += STREAM_DATA) {
          this.#sendStream(id, STREAM_OP.DATA, bytes.subarray(at, at + STREAM_DATA));
        }
      },
      end: () => {
        if (this.#streams.delete(id) && this.readyState === 1) this.#sendStream(id, STREAM_OP.END);
      },
    };
  }

  #sendStream(id, op, data = new Uint8Array(0)) {
    const body = new Uint8Array(5 + data.length);
    new DataView(body.buffer).setUint32(0, id);
    body[4] = op;
    body.set(data, 5);
    this.#publish(this.#sealer.seal(KIND.STREAM, body));
  }

  #endStreams(error) {
    const open = [...this.#streams.values()];
    this.#streams.clear();
    for (const s of open) s.onend(error);
  }

  #onStream(body) {
    if (body.length < 5) return;
    const id = new DataView(body.buffer, body.byteOffset, 4).getUint32(0);
    const stream = this.#streams.get(id);
    if (!stream) return; // ended here already: what was in flight is dropped
    if (body[4] === STREAM_OP.DATA) {
      stream.ondata(body.slice(5));
    } else if (body[4] === STREAM_OP.END) {
      this.#streams.delete(id);
      let error = null;
      try {
        if (body.length > 5) error = String(JSON.parse(decoder.decode(body.subarray(5))).error || 'ended');
      } catch { error = 'ended'; }
      stream.onend(error);
    }
  }

  /** Forget the connection and report it closed (once), like a WebSocket's close event. */
  lose(code, reason) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.#endStreams('closed');
    clearInterval(this.#tick);
    try { this.#sub?.unsubscribe(); } catch { /* closed with the connection */ }
    this.#station.detach(this);
    if (code !== 1000) console.warn(`agent-bridge relay: ${reason} (${code})`);
    setTimeout(() => this.onclose?.({ type: 'close', code, reason, wasClean: code === 1000 }), 0);
  }

  #publish(message) {
    this.#nc.publish(this.#subjectUp, message);
    this.#lastSent = Date.now();
    this.stats.sent++;
  }

  #dropped(why) {
    this.stats.dropped++;
    this.#station.noteDropped(why);
  }

  #onTick() {
    if (this.readyState !== 1) return;
    const now = Date.now();
    const { keepaliveMs, silenceMs } = this.#station.timing;
    if (now - this.#lastHeard >= silenceMs) {
      this.lose(CLOSE.SILENT, `nothing heard from the workstation for ${Math.round(silenceMs / 1000)} s`);
      return;
    }
    if (now - this.#lastSent >= keepaliveMs) {
      this.#publish(this.#sealer.seal(KIND.KEEPALIVE));
      this.stats.keepalivesSent++;
    }
  }

  #onMessage(data) {
    if (this.readyState === 0) {
      if (this.#early.length < MAX_EARLY) this.#early.push(data);
      else this.#dropped('too many before the open was answered');
      return;
    }
    if (this.readyState !== 1) return;
    let opened;
    try {
      opened = this.#opener.open(data);
    } catch (err) {
      // Unauthenticated: not the daemon's. It moves no counter and keeps nothing alive.
      this.#dropped(err.message);
      return;
    }
    this.#lastHeard = Date.now();
    this.stats.received++;
    // a stream needs every byte: after lost messages, its request is asked again
    if (this.#opener.gap && this.#streams.size) this.#endStreams('gap');
    if (!opened) return;
    if (opened.stream) {
      this.#onStream(opened.stream);
      return;
    }
    if (opened.close) {
      this.lose(opened.close.code, opened.close.reason);
      return;
    }
    if (opened.frame !== undefined) this.onmessage?.({ type: 'message', data: opened.frame });
    for (const frame of opened.frames || []) this.onmessage?.({ type: 'message', data: frame });
  }
}
