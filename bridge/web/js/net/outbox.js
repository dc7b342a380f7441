// The outbox (docs/web-client.md, "The outbox"): nothing typed is lost. A message goes into
// IndexedDB before anything else; typed while its workstation (or the relay) cannot be
// reached, it waits there, shown as "waiting for NAME", survives closing the page, and is sent
// when the workstation is back; in flight when the page closed, it is sent again. Each keeps
// its client_msg_id, so the daemon takes it exactly once. It leaves the outbox once the daemon
// answered, or when the person cancels it while it waits.
//
// A relay workstation that is away (the relay up, its daemon silent) gets each waiting message
// on the relay's work queue too, sealed to its key (`relay`): the daemon takes it when it is
// back even if this page is closed by then. The entry stays here, marked `relayed`, until the
// daemon answers it directly; sent again then, it is known by its client_msg_id.
//
// One the daemon answered `queued` (it waits there behind a running turn) is not in the
// session's log until its turn starts, so it stays here, marked `queued` and never sent again,
// until its `user` block is seen or the session has nothing queued: a page opened meanwhile
// still shows it.

import { idb } from './kv.js';

const PREFIX = 'outbox:';
/** Refusals that trying again will not change: the message leaves the outbox, shown failed. */
const FINAL = new Set(['not_found', 'bad_request', 'conflict', 'too_large', 'unauthorized']);

/** The `session.send` an entry is, for the daemon or for the relay's work queue. */
function sendFields(entry) {
  return {
    session: entry.session, text: entry.text, attachments: entry.attachments || [], client_msg_id: entry.id,
  };
}

export class Outbox extends EventTarget {
  constructor() {
    super();
    this.entries = new Map(); // client_msg_id -> {id, ws, session, text, attachments, created}
    this.sending = new Set();
    this.flushing = new Map(); // workstation id -> the flush (or hand-over) under way
    this.started = new Set(); // ids whose user block was seen: queued no more
    /** Resolves once what an earlier page left is read back (flush waits for it). */
    this.ready = null;
  }

  load() {
    this.ready = this.#read();
    return this.ready;
  }

  async #read() {
    try {
      const keys = await idb('readonly', (s) => s.getAllKeys());
      const values = await idb('readonly', (s) => s.getAll());
      keys.forEach((k, i) => { if (String(k).startsWith(PREFIX)) this.entries.set(values[i].id, values[i]); });
    } catch { /* no IndexedDB (a private window): messages are sent as before, not kept */ }
    this.changed();
  }

  async put(entry) {
    this.entries.set(entry.id, entry);
    await idb('readwrite', (s) => s.put(entry, PREFIX + entry.id)).catch(() => {});
    this.changed();
  }

  async drop(id) {
    this.entries.delete(id);
    await idb('readwrite', (s) => s.delete(PREFIX + id)).catch(() => {});
    this.changed();
  }

  /** The messages of a workstation (or of one of its sessions), oldest first; those the daemon
   *  holds queued too. */
  of(wsId, session = null) {
    return [...this.entries.values()]
      .filter((e) => e.ws === wsId && (!session || e.session === session))
      .sort((a, b) => a.created - b.created);
  }

  /** The messages of a workstation still to be sent (not those the daemon holds queued). */
  unsent(wsId) {
    return this.of(wsId).filter((e) => !e.queued);
  }

  /** The `user` block of message `id` is in its session's log: it left the daemon's queue. */
  userSeen(id) {
    this.started.add(id);
    if (this.entries.get(id)?.queued) this.drop(id);
  }

  /** A session of `wsId` has nothing queued at the daemon (`sessions.list`, a state frame):
   *  the messages it held queued have all started (or were dropped with the session's end). */
  nothingQueued(wsId, session) {
    for (const e of this.of(wsId, session)) if (e.queued) this.drop(e.id);
  }

  changed() {
    this.dispatchEvent(new Event('change'));
  }

  /** Send `entry` on `client`; `onDone({queued})` or `onFailed(message)` once it left the
   *  outbox. A lost connection leaves it waiting (sent again on the next flush). */
  async send(client, entry, { onDone = () => {}, onFailed = () => {} } = {}) {
    if (this.sending.has(entry.id)) return;
    this.sending.add(entry.id);
    try {
      // `steer` only to the daemon itself: a message that waited on the relay's queue is sent
      // as any message (the turn it was meant for has ended meanwhile)
      const fields = { ...sendFields(entry), ...(entry.steer ? { steer: true } : {}) };
      const result = await client.request('session.send', fields);
      if (result.queued && !this.started.has(entry.id)) await this.put({ ...entry, queued: Date.now() });
      else await this.drop(entry.id);
      onDone(result);
    } catch (err) {
      if (FINAL.has(err.code)) {
        await this.drop(entry.id);
        onFailed(err.message);
      }
    } finally {
      this.sending.delete(entry.id);
    }
  }

  /** The workstation is reachable: its waiting messages go, in order. */
  flush(ws, hooks = () => ({})) {
    return this.#inTurn(ws, () => this.#flush(ws, hooks));
  }

  /** A relay workstation is away while its relay is up: what waits for it and is not on the
   *  relay's work queue yet goes there, in order; `hooks(entry).onRelayed()` for each. */
  relay(ws, hooks = () => ({})) {
    return this.#inTurn(ws, () => this.#relay(ws, hooks));
  }

  // one flush or hand-over of a workstation at a time, so its messages keep their order
  #inTurn(ws, work) {
    const before = this.flushing.get(ws.id) || Promise.resolve();
    const next = before.then(work);
    this.flushing.set(ws.id, next);
    return next;
  }

  async #relay(ws, hooks) {
    await this.ready;
    if (!ws.station || ws.station.noQueue) return;
    for (const entry of this.unsent(ws.id)) {
      if (entry.relayed || ws.client.isOpen || !this.entries.has(entry.id)) continue;
      this.sending.add(entry.id); // no Cancel while it goes: the relay would keep it anyway
      try {
        await ws.station.enqueue(sendFields(entry));
      } catch (err) {
        // not kept there (no queue, full, too large, the relay gone): it waits here, as before;
        // the rest would be out of order on the queue without it
        if (err.code === 'no_queue') ws.station.noQueue = true;
        console.warn(`agent-bridge: not left on the relay: ${err.message || err}`);
        return;
      } finally {
        this.sending.delete(entry.id);
      }
      await this.put({ ...entry, relayed: Date.now() });
      hooks(entry).onRelayed?.();
    }
  }

  async #flush(ws, hooks) {
    await this.ready;
    for (const entry of this.unsent(ws.id)) {
      if (!ws.client.isOpen) return;
      await this.send(ws.client, entry, hooks(entry));
    }
  }
}
