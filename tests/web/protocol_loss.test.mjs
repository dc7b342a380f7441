// protocol.js's loss handling with a stand-in transport (what relay.js's RelaySocket offers):
// node --test, run by tests/test_web_protocol_loss.py. No network, no timing assertions: the
// retransmit timer is made short so the cases run quickly.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { until } from './until.mjs';

const { BridgeClient } = await import('../../bridge/web/js/net/protocol.js');

/** A WebSocket-like object whose far end is the test. */
class FakeSocket {
  constructor(log) {
    this.sent = [];
    this.closed = null;
    log.push(this);
    setTimeout(() => this.onopen?.({}), 0);
  }
  send(text) { this.sent.push(JSON.parse(text)); }
  close(code, reason) { this.closed = { code, reason }; }
  deliver(frame) { this.onmessage?.({ data: JSON.stringify(frame) }); }
}

async function opened(options = {}) {
  const sockets = [];
  const client = new BridgeClient({ transport: () => new FakeSocket(sockets), retransmitMs: 30, ...options });
  client.start();
  await until(() => sockets[0]?.sent.length === 1, 'hello sent');
  const hello = sockets[0].sent[0];
  sockets[0].deliver({ t: 'ok', id: hello.id, result: { server: { name: 'agent-bridge' } } });
  await until(() => client.isOpen, 'open');
  return { client, sockets, hello };
}

test('over a transport the hello carries no token', async () => {
  const { client, hello } = await opened({ token: 'secret-token' });
  assert.equal(hello.t, 'hello');
  assert.ok(!('token' in hello));
  client.stop();
});

test('an unanswered request is sent again with the same id, and answered once', async () => {
  const { client, sockets } = await opened();
  const ws = sockets[0];
  const answer = client.request('sessions.list', { include_external: true });
  await until(() => ws.sent.filter((f) => f.t === 'sessions.list').length === 2, 'a retransmit');
  const [first, second] = ws.sent.filter((f) => f.t === 'sessions.list');
  assert.deepEqual(first, second);
  ws.deliver({ t: 'ok', id: first.id, result: { sessions: [] } });
  ws.deliver({ t: 'ok', id: first.id, result: { sessions: ['late duplicate'] } });
  assert.deepEqual(await answer, { sessions: [] });
  assert.ok(client.stats.retransmits >= 1);
  client.stop();
});

test('session.send always carries a client_msg_id, the same in every retransmit', async () => {
  const { client, sockets } = await opened();
  const ws = sockets[0];
  const answer = client.request('session.send', { session: 's1', text: 'hi' });
  await until(() => ws.sent.filter((f) => f.t === 'session.send').length === 2, 'a retransmit');
  const sends = ws.sent.filter((f) => f.t === 'session.send');
  assert.ok(sends[0].client_msg_id);
  assert.equal(sends[0].client_msg_id, sends[1].client_msg_id);
  ws.deliver({ t: 'ok', id: sends[0].id, result: { queued: 0 } });
  await answer;
  client.stop();
});

test('after 3 tries the connection is given up and reopened; the request goes out again', async () => {
  const { client, sockets } = await opened();
  const answer = client.request('agents.list');
  await until(() => sockets[0].closed !== null, 'the first connection closed');
  assert.equal(sockets[0].sent.filter((f) => f.t === 'agents.list').length, 3);
  client.nudge();
  await until(() => sockets.length === 2 && sockets[1].sent.length === 1, 'a second hello');
  sockets[1].deliver({ t: 'ok', id: sockets[1].sent[0].id, result: {} });
  await until(() => sockets[1].sent.some((f) => f.t === 'agents.list'), 'the request again');
  const again = sockets[1].sent.find((f) => f.t === 'agents.list');
  sockets[1].deliver({ t: 'ok', id: again.id, result: { agents: [] } });
  assert.deepEqual(await answer, { agents: [] });
  client.stop();
});

test('a seq gap re-subscribes from the last seq shown; duplicates are dropped', async () => {
  const { client, sockets } = await opened({ retransmitMs: 0 });
  const ws = sockets[0];
  const shown = [];
  client.subscribe('s1', { onEvent: (f) => shown.push(f.seq) });
  const sub1 = ws.sent.find((f) => f.t === 'session.subscribe');
  assert.equal(sub1.after_seq, 0);
  ws.deliver({ t: 'ok', id: sub1.id, result: { state: 'idle', last_seq: 0 } });
  const ev = (seq) => ({ t: 'event', session: 's1', seq, block: { type: 'text', text: String(seq) } });
  ws.deliver(ev(1));
  ws.deliver(ev(2));
  ws.deliver(ev(2)); // a duplicate
  ws.deliver(ev(4)); // 3 was lost
  const subs = ws.sent.filter((f) => f.t === 'session.subscribe');
  assert.equal(subs.length, 2);
  assert.equal(subs[1].after_seq, 2);
  ws.deliver({ t: 'ok', id: subs[1].id, result: { state: 'idle', last_seq: 4 } });
  ws.deliver(ev(3));
  ws.deliver(ev(4));
  assert.deepEqual(shown, [1, 2, 3, 4]);
  assert.equal(client.stats.duplicatesDropped, 1);
  client.stop();
});
