// relay-crypto.js against the daemon side's own interop vectors (tests/fixtures/relay_vectors.json,
// made by tests/relay_vectors.py with PyNaCl): node --test, run by tests/test_web_relay_crypto.py.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(import.meta.url);
const nacl = require('../../bridge/web/vendor/tweetnacl/nacl-fast.js');
const { DIR_DOWN, DIR_UP, KIND, Opener, RelayCrypto, Sealer, b64decode, b64encode } = await import('../../bridge/web/js/net/relay-crypto.js');

const v = JSON.parse(readFileSync(new URL('../fixtures/relay_vectors.json', import.meta.url), 'utf-8'));
const rc = new RelayCrypto(nacl);
const client = { pk: v.client.pk, sk: v.client.sk };
const innerOf = (entry) => JSON.parse(entry.plaintext);

test('pair request: the same box for the same plaintext and nonce', () => {
  const inner = innerOf(v.pair_request_box);
  const link = { pk: v.daemon.pk, secret: inner.secret };
  const req = rc.pairRequest(link, client, inner.name, b64decode(v.pair_request_box.n));
  assert.equal(req.box, v.pair_request_box.box);
});

test('pair reply opens to the client id', () => {
  const reply = { ok: true, n: v.pair_reply_box.n, box: v.pair_reply_box.box };
  assert.equal(rc.pairReply(reply, v.daemon.pk, client), innerOf(v.pair_reply_box).client_id);
});

test('a message for the work queue: the same box for the same plaintext and nonce', () => {
  const inner = innerOf(v.queued_box);
  const msg = rc.queuedMessage(v.daemon.pk, client, inner.client_id, inner.send, {
    nowS: inner.ts, nonce: b64decode(v.queued_box.n),
  });
  assert.deepEqual(msg, { v: 1, pk: v.client.pk, n: v.queued_box.n, box: v.queued_box.box });
});

test('open request and reply: same box, same connection key', () => {
  const inner = innerOf(v.open_request_box);
  const eph = nacl.box.keyPair.fromSecretKey(b64decode(v.client_eph.sk));
  const { request, state } = rc.openRequest(v.daemon.pk, client, {
    nowS: inner.ts, eph, conn: v.conn, nonce: b64decode(v.open_request_box.n),
  });
  assert.equal(request.box, v.open_request_box.box);
  assert.equal(request.eph, v.client_eph.pk);
  const reply = { ok: true, eph: v.daemon_eph.pk, n: v.open_reply_box.n, box: v.open_reply_box.box };
  assert.equal(b64encode(rc.openReply(reply, v.daemon.pk, client, state)), v.connection_key);
});

test('up frames sealed as the daemon expects them', () => {
  const s = new Sealer(nacl, b64decode(v.connection_key), DIR_UP);
  for (const f of v.up_frames) {
    const body = new TextEncoder().encode(f.body_utf8);
    assert.equal(b64encode(s.seal(f.kind, body)), f.payload, `counter ${f.counter}`);
  }
});

test('down frames open; the fragmented frame is cut where the daemon cuts it', () => {
  const o = new Opener(nacl, b64decode(v.connection_key), DIR_DOWN);
  const got = v.down_frames.map((f) => o.open(b64decode(f.payload)));
  assert.deepEqual(got[0], { frame: v.down_frames[0].body_utf8 });
  assert.deepEqual(got[1], { keepalive: true });
  assert.deepEqual(got[2], { frames: ['{"type":"result","id":"2","ok":true}', '{"type":"pong"}'] });
  const fr = v.fragmented_down;
  const frame = '0123456789'.repeat(Math.ceil(fr.frame_len / 10)).slice(0, fr.frame_len);
  const sealed = new Sealer(nacl, b64decode(v.connection_key), DIR_DOWN).sealFrame(frame);
  assert.equal(sealed.length, fr.messages.length);
  sealed.forEach((m, i) => {
    assert.equal(m.length, fr.messages[i].payload_len);
    assert.equal(createHash('sha256').update(m).digest('hex'), fr.messages[i].payload_sha256);
  });
});

test('the daemon\'s rejection cases are rejected here too', () => {
  const key = b64decode(v.connection_key);
  const tampered = new Opener(nacl, key, DIR_UP);
  assert.throws(() => tampered.open(b64decode(v.rejections.tampered_up_1.payload)), /bad MAC/);
  const replayed = new Opener(nacl, key, DIR_UP);
  replayed.open(b64decode(v.up_frames[0].payload));
  assert.throws(() => replayed.open(b64decode(v.rejections.replayed_up_1.payload)), /counter/);
});

test('a preview\'s streams: STREAM messages sealed and opened as the daemon makes them', () => {
  const key = b64decode(v.connection_key);
  const body = (c) => {
    const data = b64decode(c.data_b64);
    const out = new Uint8Array(5 + data.length);
    new DataView(out.buffer).setUint32(0, c.stream);
    out[4] = c.op;
    out.set(data, 5);
    return out;
  };
  const s = new Sealer(nacl, key, DIR_UP);
  for (const c of v.stream_up) assert.equal(b64encode(s.seal(KIND.STREAM, body(c))), c.payload);
  const o = new Opener(nacl, key, DIR_DOWN);
  for (const c of v.stream_down) assert.deepEqual(o.open(b64decode(c.payload)), { stream: body(c) });
});
