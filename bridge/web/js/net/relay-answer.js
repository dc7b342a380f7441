// Answering a relay workstation's permission request from its notification, in the service
// worker (sw.js), with no page open: this browser's keys for that workstation (the record the
// page mirrors into IndexedDB, js/net/workstations.js) open a virtual connection through the relay,
// send `session.permission`, and close it. A stale or duplicate answer is refused by the daemon
// by its request id and changes nothing.

import { idb } from './kv.js';
import { BridgeClient } from './protocol.js';
import { RelayStation } from './relay.js';

const ANSWER_TIMEOUT_MS = 20_000;

/** Resolves once the daemon took the answer; throws when it cannot be given from here. */
export async function answerThroughRelay(wsId, session, requestId, optionId) {
  const record = await idb('readonly', (s) => s.get(`ws:${wsId}`));
  if (!record || record.kind !== 'relay') throw new Error(`no relay record for ${wsId}`);
  const station = new RelayStation(record);
  const client = new BridgeClient({
    transport: () => station.socket(), clientName: 'agent-bridge notification',
  });
  client.start();
  let timer;
  try {
    await Promise.race([
      client.request('session.permission', { session, request_id: requestId, option_id: optionId }),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('timeout')), ANSWER_TIMEOUT_MS); }),
    ]);
  } finally {
    clearTimeout(timer);
    client.stop();
    station.close();
  }
}
