// A complete client for agent-bridge protocol v1 (docs/protocol.md), with no UI in it.
//
// What a client has to get right, and where it happens here:
// - Authenticate in the first frame: browsers cannot set an Authorization header, so the
//   token goes in `hello.token` (#onOpen). A 4401 close means the token is wrong: stop.
// - Match answers to requests by `id` (#pending); every request is answered exactly once.
// - Reconnect by itself with capped, jittered exponential backoff (#scheduleReconnect), and
//   after each new hello re-subscribe every session with `after_seq` = the last seq this
//   client applied (#resubscribe). Events are applied strictly in seq order: one at or below
//   the last applied seq is a duplicate and dropped; a jump means something was lost, so the
//   client re-subscribes from what it has (#onEvent). The UI never sees a duplicate or a hole.
// - Retransmit requests that are safe to repeat after a reconnect (`session.send` carries a
//   `client_msg_id`, which the daemon uses to answer a retransmit like the first send).
// - Detect a dead connection the socket has not noticed (phones switching networks) with an
//   application `ping` (#heartbeat).
// - Over a relay (a `transport` that makes relay.js sockets), NATS may drop a message without
//   closing anything: a request unanswered for 10 s is sent again with the same id, and after
//   3 tries the virtual connection is given up and reopened (#armRetransmit).

export const PROTOCOL = 1;
export const SUBPROTOCOL = 'bridge.v1.json';

/** Requests that may be sent again after a reconnect without changing the outcome. */
const RETRYABLE = new Set([
  'agents.list', 'agents.check', 'models.list', 'sessions.list', 'usage.get', 'ping',
  'session.send', 'session.interrupt',
]);

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 15_000;
const HEARTBEAT_MS = 25_000;
const HEARTBEAT_TIMEOUT_MS = 10_000;
const RETRANSMIT_MS = 10_000;
const RETRANSMIT_TRIES = 3;

export class RequestError extends Error {
  /** `hint`: what to do; `output`: what git, gh or a hook printed (the ship requests). */
  constructor(code, message, hint = null, output = null) {
    super(message);
    this.code = code;
    this.hint = hint;
    this.output = output;
  }
}

/** The daemon's WebSocket URL for a page it served: same host and port, ws or wss. */
export function defaultUrl(loc = window.location) {
  return `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}/v1/ws`;
}

/**
 * Events (EventTarget):
 * - 'status'  detail {state, attempt, retryInMs, closeCode, reason, refused}; state is one of
 *             'connecting' | 'open' | 'waiting' (reconnect scheduled) | 'unauthorized' | 'stopped';
 *             refused: the daemon refuses this page's origin (it keeps retrying: the fix is
 *             the daemon's configuration)
 * - 'open'    after each successful hello (re-fetch lists here)
 * - 'agents_changed'
 */
export class BridgeClient extends EventTarget {
  #url;
  #token;
  #transport;
  #retransmitMs;
  #client;
  #ws = null;
  #nextId = 1;
  #pending = new Map(); // id -> {frame, resolve, reject, sent}
  #subs = new Map(); // session -> Subscription
  #attempt = 0;
  #timer = null;
  #heartbeat = null;
  #stopped = true;
  #open = false;
  #handshook = false; // the WebSocket handshake of the current attempt succeeded
  #refused = false;
  #probing = false;
  /** What happened on the wire, for debugging (and the tests): counts and subscribe history. */
  stats = { connects: 0, duplicatesDropped: 0, resyncs: 0, subscribes: [], retransmits: 0 };

  /**
   * `url` + `token`: the daemon's WebSocket. `transport`: instead, a function making a
   * WebSocket-like object (relay.js's RelaySocket); then no token is sent (the relay's keys
   * authenticate) and unanswered requests are retransmitted (`retransmitMs`).
   */
  constructor({
    url, token, transport = null, retransmitMs = transport ? RETRANSMIT_MS : 0,
    clientName = 'agent-bridge web', clientVersion = '1',
  }) {
    super();
    this.#url = url;
    this.#token = token;
    this.#transport = transport;
    this.#retransmitMs = retransmitMs;
    this.#client = { name: clientName, version: clientVersion };
    this.status = { state: 'stopped', attempt: 0 };
  }

  get isOpen() {
    return this.#open;
  }

  start() {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#connect();
  }

  stop() {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#stopHeartbeat();
    const ws = this.#ws;
    this.#ws = null;
    this.#open = false;
    if (ws) ws.close(1000, 'bye');
    this.#failPending(new RequestError('disconnected', 'the client was stopped'), true);
    this.#setStatus({ state: 'stopped' });
  }

  /** Reconnect now if a retry is scheduled (the page became visible, the network came back).
   *  `fresh`: what failed before is fixed (a relay is back), so the backoff starts over. */
  nudge(fresh = false) {
    if (fresh) this.#attempt = 0;
    if (!this.#stopped && !this.#ws) {
      clearTimeout(this.#timer);
      this.#connect();
    }
  }

  /** Send request `t` with `fields`; resolves with `result`, rejects with RequestError. */
  request(t, fields = {}) {
    const id = this.#nextId++;
    const frame = { t, id, ...fields };
    // The daemon answers a repeated send with the first one's outcome only when it can tell
    // them apart: with a client_msg_id, which every retransmit then shares.
    if (t === 'session.send' && !frame.client_msg_id) frame.client_msg_id = `m-${Date.now().toString(36)}-${id}`;
    return new Promise((resolve, reject) => {
      if (this.#stopped) {
        reject(new RequestError('disconnected', 'the client is not running'));
        return;
      }
      const entry = { frame, resolve, reject, sent: false };
      this.#pending.set(id, entry);
      if (this.#open) this.#transmit(entry);
      // Otherwise it goes out right after the next hello (#flushPending).
    });
  }

  /**
   * Follow a session's events. `handlers.onEvent(frame)` gets each event frame once, in seq
   * order; `handlers.onState(state)` gets {state, writer?, queued?} from `state` frames and
   * from each subscribe answer. `afterSeq` is where the caller's copy ends (0: from the start).
   */
  subscribe(session, handlers, afterSeq = 0) {
    const sub = { session, lastSeq: afterSeq, resyncing: false, ...handlers };
    this.#subs.set(session, sub);
    if (this.#open) this.#sendSubscribe(sub);
    return sub;
  }

  unsubscribe(session) {
    if (!this.#subs.delete(session)) return;
    if (this.#open) this.request('session.unsubscribe', { session }).catch(() => {});
  }

  lastSeq(session) {
    return this.#subs.get(session)?.lastSeq ?? 0;
  }

  // ---- connection --------------------------------------------------------------------------

  #setStatus(status) {
    this.status = { attempt: this.#attempt, refused: this.#refused, ...status };
    this.dispatchEvent(new CustomEvent('status', { detail: this.status }));
  }

  #connect() {
    this.#setStatus({ state: 'connecting' });
    let ws;
    try {
      ws = this.#transport ? this.#transport() : new WebSocket(this.#url, [SUBPROTOCOL]);
    } catch (err) {
      this.#scheduleReconnect(0, String(err));
      return;
    }
    this.#ws = ws;
    this.#handshook = false;
    ws.onopen = () => {
      this.#handshook = true;
      this.#onOpen(ws);
    };
    ws.onmessage = (msg) => this.#onMessage(ws, msg);
    ws.onclose = (ev) => this.#onClose(ws, ev);
  }

  #onOpen(ws) {
    const id = this.#nextId++;
    this.#pending.set(id, {
      frame: null,
      sent: true,
      resolve: (result) => {
        this.server = result?.server || null; // {name, version, home}
        this.#open = true;
        this.#refused = false;
        this.#attempt = 0;
        this.stats.connects++;
        this.#setStatus({ state: 'open' });
        this.#startHeartbeat();
        this.#flushPending();
        this.#resubscribe();
        this.dispatchEvent(new Event('open'));
      },
      reject: (err) => this.#setStatus({ state: 'connecting', reason: err.message }),
    });
    const hello = { t: 'hello', id, protocol: PROTOCOL, client: this.#client };
    if (!this.#transport) hello.token = this.#token;
    ws.send(JSON.stringify(hello));
    if (this.#retransmitMs) {
      // A hello lost on the relay would leave the link half-open: start over instead.
      setTimeout(() => {
        if (ws === this.#ws && !this.#open) {
          ws.close(4000, 'no answer to hello');
          this.#onClose(ws, { code: 4000, reason: 'no answer to hello' });
        }
      }, this.#retransmitMs);
    }
  }

  #onClose(ws, ev) {
    if (ws !== this.#ws) return;
    this.#ws = null;
    this.#open = false;
    this.#stopHeartbeat();
    // Requests already on the wire have an unknown outcome: retry the safe ones, fail the rest.
    this.#failPending(new RequestError('disconnected', 'the connection was lost'), false);
    if (this.#stopped) return;
    if (ev.code === 4401) {
      this.#stopped = true;
      this.#failPending(new RequestError('unauthorized', 'the daemon rejected the token'), true);
      this.#setStatus({ state: 'unauthorized', closeCode: ev.code, reason: ev.reason });
      return;
    }
    // 4408 (too slow) and 1001 (daemon restarting) are worth an immediate first retry.
    this.#scheduleReconnect(ev.code, ev.reason);
    if (!this.#handshook && !this.#transport) this.#probeRefusal();
  }

  /** A browser hides why a WebSocket handshake failed. The daemon answers its 403 for a
   *  refused origin with CORS, so fetch() can tell "refused" from "offline". */
  async #probeRefusal() {
    if (this.#probing) return;
    this.#probing = true;
    let refused = false;
    try {
      const url = new URL(this.#url);
      url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
      const r = await fetch(url, { cache: 'no-store' });
      refused = r.status === 403 && (await r.json())?.error === 'origin not allowed';
    } catch { /* unreachable, or not a daemon's answer: offline */ }
    this.#probing = false;
    if (refused !== this.#refused && !this.#open && !this.#stopped) {
      this.#refused = refused;
      this.#setStatus({ ...this.status, refused });
    }
  }

  #scheduleReconnect(closeCode, reason) {
    const attempt = this.#attempt++;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** attempt);
    const retryInMs = Math.round(base / 2 + Math.random() * (base / 2));
    this.#setStatus({ state: 'waiting', retryInMs, closeCode, reason });
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#connect(), retryInMs);
  }

  #failPending(error, all) {
    for (const [id, entry] of this.#pending) {
      if (entry.frame === null) {
        this.#pending.delete(id); // a hello that never got its answer
        continue;
      }
      if (!all && (!entry.sent || RETRYABLE.has(entry.frame.t))) {
        entry.sent = false; // goes out again after the next hello
        continue;
      }
      this.#pending.delete(id);
      entry.reject(error);
    }
  }

  #flushPending() {
    for (const entry of this.#pending.values()) {
      if (!entry.sent && entry.frame !== null) this.#transmit(entry);
    }
  }

  #transmit(entry) {
    entry.sent = true;
    entry.tries = 1;
    this.#ws.send(JSON.stringify(entry.frame));
    this.#armRetransmit(entry);
  }

  /** Over a relay: send `entry` again (same id) until answered; give up on the link after 3. */
  #armRetransmit(entry) {
    if (!this.#retransmitMs) return;
    const ws = this.#ws;
    clearTimeout(entry.retransmit);
    entry.retransmit = setTimeout(() => {
      if (ws !== this.#ws || !this.#open || this.#pending.get(entry.frame.id) !== entry) return;
      if (entry.tries >= RETRANSMIT_TRIES) {
        ws.close(4000, 'no answer after 3 tries');
        this.#onClose(ws, { code: 4000, reason: 'no answer after 3 tries' });
        return;
      }
      entry.tries++;
      this.stats.retransmits++;
      ws.send(JSON.stringify(entry.frame));
      this.#armRetransmit(entry);
    }, this.#retransmitMs);
  }

  #startHeartbeat() {
    this.#stopHeartbeat();
    this.#heartbeat = setInterval(() => {
      const ws = this.#ws;
      const timer = setTimeout(() => {
        if (!ws || ws !== this.#ws) return;
        // A dead link may take minutes to report its close: give up on it now.
        ws.close(4000, 'no answer to ping');
        this.#onClose(ws, { code: 4000, reason: 'no answer to ping' });
      }, HEARTBEAT_TIMEOUT_MS);
      this.request('ping').finally(() => clearTimeout(timer)).catch(() => {});
    }, HEARTBEAT_MS);
  }

  #stopHeartbeat() {
    clearInterval(this.#heartbeat);
    this.#heartbeat = null;
  }

  // ---- frames ------------------------------------------------------------------------------

  #onMessage(ws, msg) {
    if (ws !== this.#ws) return;
    let frame;
    try {
      frame = JSON.parse(msg.data);
    } catch {
      return;
    }
    switch (frame.t) {
      case 'ok':
      case 'err': {
        const entry = this.#pending.get(frame.id);
        if (!entry) return; // unknown, or the answer to a retransmit already answered
        this.#pending.delete(frame.id);
        clearTimeout(entry.retransmit);
        if (frame.t === 'ok') entry.resolve(frame.result);
        else entry.reject(new RequestError(frame.code, frame.message, frame.hint, frame.output));
        return;
      }
      case 'event':
        this.#onEvent(frame);
        return;
      case 'state': {
        const sub = this.#subs.get(frame.session);
        if (sub?.onState) sub.onState({ state: frame.state, writer: frame.writer, queued: frame.queued });
        return;
      }
      case 'agents_changed':
        this.dispatchEvent(new Event('agents_changed'));
        return;
      default:
        // Unknown frame types are ignored: the server may add them within protocol v1.
    }
  }

  #onEvent(frame) {
    const sub = this.#subs.get(frame.session);
    if (!sub) return;
    if (frame.seq <= sub.lastSeq) {
      this.stats.duplicatesDropped++; // already applied (replay overlap): drop
      return;
    }
    if (sub.resyncing) return; // stale frames of the subscription being replaced
    const isGapNotice = frame.block?.type === 'system' && frame.block?.code === 'gap';
    if (frame.seq !== sub.lastSeq + 1 && !isGapNotice) {
      // A hole: never render past it. Ask again from the last seq we have.
      console.warn(`agent-bridge: seq ${frame.seq} after ${sub.lastSeq}; re-subscribing`);
      this.stats.resyncs++;
      this.#sendSubscribe(sub);
      return;
    }
    sub.lastSeq = frame.seq;
    sub.onEvent(frame);
  }

  #resubscribe() {
    for (const sub of this.#subs.values()) this.#sendSubscribe(sub);
  }

  #sendSubscribe(sub) {
    sub.resyncing = true;
    const id = this.#nextId++;
    const frame = { t: 'session.subscribe', id, session: sub.session, after_seq: sub.lastSeq };
    this.stats.subscribes.push({ session: sub.session, after_seq: sub.lastSeq });
    // Registered by hand (not through request()) so it is never retransmitted: after a
    // reconnect #resubscribe sends a fresh one with the then-current lastSeq.
    const entry = {
      frame,
      sent: true,
      tries: 1,
      resolve: (result) => {
        if (this.#subs.get(sub.session) !== sub) return;
        sub.resyncing = false;
        if (sub.onState) sub.onState({ state: result.state, lastSeq: result.last_seq });
      },
      reject: (err) => {
        if (err.code !== 'disconnected' && sub.onError) sub.onError(err);
      },
    };
    this.#pending.set(id, entry);
    this.#ws.send(JSON.stringify(frame));
    this.#armRetransmit(entry);
  }
}
