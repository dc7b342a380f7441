// The outbox (docs/web-client.md, "The outbox"): nothing typed is lost. A message goes into
// IndexedDB before anything else; typed while its workstation (or the relay) cannot be
// reached, it waits there, shown as "waiting for NAME", survives closing the page, and is sent
// when the workstation is back; in flight when the page closed, it is sent again. Each keeps
// its client_msg_id, so the daemon takes it exactly once. It leaves the outbox once the daemon
// answered, or when the person cancels it while it waits.

import { idb } from './kv.js';

const PREFIX = 'outbox:';
/** Refusals that trying again will not change: the message leaves the outbox, shown failed. */
const FINAL = new Set(['not_found', 'bad_request', 'conflict', 'too_large', 'unauthorized']);

export class Outbox extends EventTarget {
  constructor() {
    super();
    this.entries = new Map(); // client_msg_id -> {id, ws, session, text, attachments, created}
    this.sending = new Set();
    this.flushing = new Map(); // workstation id -> the flush under way
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

  /** The waiting messages of a workstation (or of one of its sessions), oldest first. */
  of(wsId, session = null) {
    return [...this.entries.values()]
      .filter((e) => e.ws === wsId && (!session || e.session === session))
      .sort((a, b) => a.created - b.created);
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
      const result = await client.request('session.send', {
        session: entry.session, text: entry.text, attachments: entry.attachments, client_msg_id: entry.id,
      });
      await this.drop(entry.id);
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
    // one flush of a workstation at a time, so its messages go in the order they were sent
    const before = this.flushing.get(ws.id) || Promise.resolve();
    const next = before.then(() => this.#flush(ws, hooks));
    this.flushing.set(ws.id, next);
    return next;
  }

  async #flush(ws, hooks) {
    await this.ready;
    for (const entry of this.of(ws.id)) {
      if (!ws.client.isOpen) return;
      await this.send(ws.client, entry, hooks(entry));
    }
  }
}
