// relay.js's RelaySocket against a stand-in NATS connection and a daemon made of the same
// crypto (relay-crypto.js, itself checked against PyNaCl): node --test, run by
// tests/test_web_protocol_loss.py. Liveness intervals are made short; nothing asserts on time.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { tick, until } from './until.mjs';

const require = createRequire(import.meta.url);
const nacl = require('../../bridge/web/vendor/tweetnacl/nacl-fast.js');
globalThis.nacl = nacl; // what the page's module import of nacl-fast.js does
const { CLOSE, RelayStation } = await import('../../bridge/web/js/net/relay.js');
const { DIR_DOWN, DIR_UP, KIND, Opener, RelayCrypto, Sealer, b64decode, b64encode } = await import('../../bridge/web/js/net/relay-crypto.js');

const rc = new RelayCrypto(nacl);
const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** The daemon's side of P.open, and a recorder of everything published. */
class FakeNats {
  constructor(daemon) {
    this.daemon = daemon;
    this.subs = new Map();
    this.up = [];
  }
  subscribe(subject, { callback }) {
    this.subs.set(subject, callback);
    return { unsubscribe: () => this.subs.delete(subject) };
  }
  publish(subject, data) { this.up.push({ subject, data }); }
  async request(subject, data) {
    assert.ok(subject.endsWith('.open'));
    const req = JSON.parse(decoder.decode(data));
    const inner = JSON.parse(decoder.decode(nacl.box.open(b64decode(req.box), b64decode(req.n), b64decode(req.pk), this.daemon.secretKey)));
    assert.equal(inner.conn, req.conn);
    assert.equal(inner.client_id, req.client_id);
    this.named = req.client_id;
    const eph = nacl.box.keyPair();
    const n = nacl.randomBytes(24);
    const box = nacl.box(encoder.encode(JSON.stringify({ conn: req.conn, eph: b64encode(eph.publicKey), client_eph: req.eph })), n, b64decode(req.pk), this.daemon.secretKey);
    this.key = nacl.box.before(b64decode(req.eph), eph.secretKey);
    this.conn = req.conn;
    this.sealer = new Sealer(nacl, this.key, DIR_DOWN);
    return { data: encoder.encode(JSON.stringify({ ok: true, eph: b64encode(eph.publicKey), n: b64encode(n), box: b64encode(box) })) };
  }
  get vc() { return this.named ? `agent-bridge.h.vc.${this.named}.${this.conn}` : `agent-bridge.h.vc.${this.conn}`; }
  down(message) { this.subs.get(`${this.vc}.down`)(null, { data: message }); }
  upOpened() {
    const o = new Opener(nacl, this.key, DIR_UP);
    return this.up.map((m) => o.open(m.data));
  }
}

class TestStation extends RelayStation {
  constructor(nc, daemonPk, timing, scoped = false) {
    super({ host: 'h', pk: b64encode(daemonPk), keys: rc.keyPair(), client_id: 'c-0123abcd' }, timing);
    this.nc = nc;
    this.scoped = scoped;
  }
  async connection() { return this.nc; }
}

async function openSocket(timing = { keepaliveMs: 60_000, silenceMs: 60_000, tickMs: 10 }, scoped = false) {
  const daemon = nacl.box.keyPair();
  const nc = new FakeNats(daemon);
  const station = new TestStation(nc, daemon.publicKey, timing, scoped);
  const sock = station.socket();
  const got = { frames: [], close: null, open: false };
  sock.onopen = () => { got.open = true; };
  sock.onmessage = (ev) => got.frames.push(ev.data);
  sock.onclose = (ev) => { got.close = ev; };
  await until(() => got.open, 'open');
  return { sock, nc, got, station };
}

test('frames go up sealed and come down opened, a big one in pieces both ways', async () => {
  const { sock, nc, got } = await openSocket();
  const big = JSON.stringify({ t: 'event', text: 'x'.repeat(600_000) });
  sock.send('{"t":"hello","id":1}');
  sock.send(big);
  const up = nc.upOpened();
  assert.deepEqual(up[0], { frame: '{"t":"hello","id":1}' });
  assert.ok(up.length >= 4); // hello + 3 pieces of the big one
  assert.deepEqual(up.at(-1), { frame: big });
  for (const m of nc.sealer.sealFrame(big)) nc.down(m);
  assert.deepEqual(got.frames, [big]);
  sock.close(1000, 'bye');
  assert.deepEqual(nc.upOpened().at(-1), { close: { code: 1000, reason: 'bye' } });
});

test('a replayed frame is dropped and counted; the connection goes on', async () => {
  const { sock, nc, got } = await openSocket();
  const first = nc.sealer.sealFrame('{"t":"ok","id":1}')[0];
  nc.down(first);
  nc.down(first);
  nc.down(nc.sealer.sealFrame('{"t":"ok","id":2}')[0]);
  await tick(20);
  assert.equal(got.close, null);
  assert.deepEqual(got.frames, ['{"t":"ok","id":1}', '{"t":"ok","id":2}']);
  assert.equal(sock.stats.dropped, 1);
  sock.close();
});

test('a forged frame on the down subject is dropped, counted, not shown, and closes nothing', async () => {
  const { sock, nc, got, station } = await openSocket();
  // the next counter, guessed, with a MAC that does not hold
  const forged = new Sealer(nacl, nc.key, DIR_DOWN).sealFrame('{"t":"event","forged":true}')[0];
  forged[forged.length - 1] ^= 1;
  nc.down(forged);
  // what anyone holding the relay's client login can publish: a counter far ahead, junk, a
  // JSON answer the daemon was tricked into sending there, a CLOSE sealed under another key
  const far = new Uint8Array(48);
  far[0] = 0x7f;
  nc.down(far);
  nc.down(encoder.encode('{"v":1}'));
  nc.down(new Sealer(nacl, nacl.randomBytes(32), DIR_DOWN).sealClose(4401, 'revoked'));
  nc.down(new Uint8Array(3));
  await tick(20);
  assert.equal(got.close, null);
  assert.deepEqual(got.frames, []);
  assert.equal(sock.stats.dropped, 5);
  assert.equal(station.dropped, 5);
  assert.equal(sock.readyState, 1);
  // the genuine stream goes on from the counter it had
  nc.down(nc.sealer.sealFrame('{"t":"ok","id":1}')[0]);
  assert.deepEqual(got.frames, ['{"t":"ok","id":1}']);
  sock.send('{"t":"ping","id":2}');
  assert.deepEqual(nc.upOpened().at(-1), { frame: '{"t":"ping","id":2}' });
  sock.close();
});

test('junk before the open is answered is bounded and dropped', async () => {
  const daemon = nacl.box.keyPair();
  const nc = new FakeNats(daemon);
  const request = nc.request.bind(nc);
  let downSubject = null;
  nc.request = async (subject, data) => {
    downSubject = [...nc.subs.keys()][0];
    for (let i = 0; i < 1000; i++) nc.subs.get(downSubject)(null, { data: new Uint8Array(48) });
    return request(subject, data);
  };
  const sock = new TestStation(nc, daemon.publicKey, { keepaliveMs: 60_000, silenceMs: 60_000, tickMs: 10 }).socket();
  const got = { open: false, close: null };
  sock.onopen = () => { got.open = true; };
  sock.onclose = (ev) => { got.close = ev; };
  await until(() => got.open, 'open');
  assert.equal(got.close, null);
  assert.equal(sock.stats.dropped, 1000); // 64 kept until the key came, then dropped too
  sock.close();
});

test('the daemon\'s CLOSE is reported with its code (4401: revoked)', async () => {
  const { nc, got } = await openSocket();
  nc.down(nc.sealer.sealClose(4401, 'revoked'));
  await until(() => got.close, 'closed');
  assert.deepEqual([got.close.code, got.close.reason], [4401, 'revoked']);
});

test('idle: KEEPALIVE goes up; silence: the connection is lost', async () => {
  const { sock, nc, got } = await openSocket({ keepaliveMs: 30, silenceMs: 60_000, tickMs: 10 });
  await until(() => nc.upOpened().some((m) => m?.keepalive), 'a keepalive');
  assert.equal(got.close, null);
  sock.close();
  const quiet = await openSocket({ keepaliveMs: 60_000, silenceMs: 40, tickMs: 10 });
  await until(() => quiet.got.close, 'lost');
  assert.equal(quiet.got.close.code, CLOSE.SILENT);
  // Hearing something (a keepalive) keeps it alive.
  // (a silence far above the pause between keepalives, so a loaded machine's late timer is
  // not taken for silence; heard for more than twice the silence)
  const heard = await openSocket({ keepaliveMs: 60_000, silenceMs: 250, tickMs: 10 });
  const start = Date.now();
  while (Date.now() - start < 600) {
    heard.nc.down(heard.nc.sealer.seal(KIND.KEEPALIVE));
    await tick(20);
  }
  assert.equal(heard.got.close, null);
  heard.sock.close();
});

test('with its own NATS user, the client names itself and uses the subjects that name it', async () => {
  const { sock, nc, got } = await openSocket(undefined, true);
  assert.equal(nc.named, 'c-0123abcd');
  assert.deepEqual([...nc.subs.keys()], [`agent-bridge.h.vc.c-0123abcd.${nc.conn}.down`]);
  sock.send('{"t":"hello","id":1}');
  assert.equal(nc.up[0].subject, `agent-bridge.h.vc.c-0123abcd.${nc.conn}.up`);
  nc.down(nc.sealer.sealFrame('{"t":"ok","id":1}')[0]);
  assert.deepEqual(got.frames, ['{"t":"ok","id":1}']);
  // without one (a hosted NATS's shared login), the subjects stay as they were
  const shared = await openSocket();
  assert.equal(shared.nc.named, undefined);
  assert.deepEqual([...shared.nc.subs.keys()], [`agent-bridge.h.vc.${shared.nc.conn}.down`]);
  sock.close();
  shared.sock.close();
});

test('a login request opens for the daemon only, and its reply gives the login', () => {
  const daemon = nacl.box.keyPair();
  const keys = rc.keyPair();
  const req = rc.loginRequest(b64encode(daemon.publicKey), keys, { nowS: 1700000000 });
  const inner = JSON.parse(decoder.decode(nacl.box.open(b64decode(req.box), b64decode(req.n), b64decode(keys.pk), daemon.secretKey)));
  assert.deepEqual(inner, { login: true, ts: 1700000000 });
  const n = nacl.randomBytes(24);
  const body = { client_id: 'c-0123abcd', login: { user: 'h-c-0123abcd', pass: 'p'.repeat(24) } };
  const box = nacl.box(encoder.encode(JSON.stringify(body)), n, b64decode(keys.pk), daemon.secretKey);
  const reply = { ok: true, n: b64encode(n), box: b64encode(box) };
  assert.deepEqual(rc.loginReply(reply, b64encode(daemon.publicKey), keys), { clientId: 'c-0123abcd', login: body.login });
  assert.throws(() => rc.loginReply({ ok: false, error: 'revoked' }, b64encode(daemon.publicKey), keys), /revoked/);
  const other = nacl.box.keyPair(); // not this workstation's daemon
  assert.throws(() => rc.loginReply(reply, b64encode(other.publicKey), keys), /not from this workstation/);
});

test('a preview stream goes up as STREAM messages and its answer comes down to it; a gap or a lost connection ends it', async () => {
  const { sock, nc } = await openSocket();
  const streamBody = (id, op, data = new Uint8Array(0)) => {
    const b = new Uint8Array(5 + data.length);
    new DataView(b.buffer).setUint32(0, id);
    b[4] = op;
    b.set(data, 5);
    return b;
  };
  const seen = { one: [], oneEnd: undefined, two: [], twoEnd: undefined };
  const one = sock.openStream('pv_a', { ondata: (d) => seen.one.push(decoder.decode(d)), onend: (e) => { seen.oneEnd = e; } });
  one.write(encoder.encode('GET / HTTP/1.1\r\n\r\n'));
  const up = nc.upOpened();
  assert.equal(decoder.decode(up[0].stream.subarray(5)), '{"preview":"pv_a"}');
  assert.deepEqual([...up[0].stream.subarray(0, 5)], [0, 0, 0, 1, 1]); // stream 1, OPEN
  assert.deepEqual([...up[1].stream.subarray(0, 5)], [0, 0, 0, 1, 2]); // DATA
  assert.equal(decoder.decode(up[1].stream.subarray(5)), 'GET / HTTP/1.1\r\n\r\n');
  nc.down(nc.sealer.seal(KIND.STREAM, streamBody(1, 2, encoder.encode('HTTP/1.1 200 OK\r\n'))));
  nc.down(nc.sealer.seal(KIND.STREAM, streamBody(1, 3)));
  assert.deepEqual(seen.one, ['HTTP/1.1 200 OK\r\n']);
  assert.equal(seen.oneEnd, null);
  one.end(); // ended by the daemon already: nothing more goes up
  assert.equal(nc.upOpened().length, 2);
  // a stream ended by the daemon with an error; then one that a gap ends
  const missing = sock.openStream('pv_gone', { ondata: () => {}, onend: (e) => { seen.missingEnd = e; } });
  nc.down(nc.sealer.seal(KIND.STREAM, streamBody(2, 3, encoder.encode('{"error":"not_found"}'))));
  assert.equal(seen.missingEnd, 'not_found');
  missing.end();
  sock.openStream('pv_a', { ondata: (d) => seen.two.push(d), onend: (e) => { seen.twoEnd = e; } });
  nc.sealer.seal(KIND.KEEPALIVE); // sealed, never delivered: lost on the way
  nc.down(nc.sealer.seal(KIND.STREAM, streamBody(3, 2, encoder.encode('late'))));
  assert.equal(seen.twoEnd, 'gap');
  assert.deepEqual(seen.two, []);
  const three = { end: undefined };
  sock.openStream('pv_a', { ondata: () => {}, onend: (e) => { three.end = e; } });
  sock.close();
  assert.equal(three.end, 'closed');
});
