// How a session's state reads, in its header and in the lists.

import { h } from './dom.js';

/** "parked · a terminal owns it · 2 queued"; `short` leaves out who owns it (for lists). */
export function stateLabel({ state, writer, queued, needs }, short = false) {
  // `needs` (docs/protocol.md): the session waits on a person, which says more than `running`.
  let text = needs ? 'needs you' : state || 'unknown';
  if (state === 'parked' && writer === 'terminal' && !short) text += ' · a terminal owns it';
  if (queued) text += ` · ${queued} queued`;
  return text;
}

export function stateBadge(s) {
  return h('span', { class: 'badge state', dataset: { state: s.needs ? 'needs' : s.state } }, stateLabel(s, true));
}

/**
 * A session the daemon found in an agent's own terminal history but does not host yet: it has
 * no event log to subscribe to until `session.attach` adopts it. The daemon names these
 * `ext:<agent>:<agent_session_id>` (docs/protocol.md). An adopted one keeps `external: true`.
 */
export function isFoundOnDisk(s) {
  return s.external && s.session.startsWith('ext:');
}
