// relay-crypto.js against vectors made by PyNaCl (the daemon's library): node --test, with
// RELAY_VECTORS naming the JSON file (tests/test_web_relay_crypto.py writes and runs it).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const require = createRequire(import.meta.url);
const nacl = require('../../bridge/web/vendor/tweetnacl/nacl-fast.js');
const {
  DIR_DOWN, DIR_UP, KIND, MAX_PLAINTEXT, Opener, RelayCrypto, Sealer, b64decode, b64encode, otherUrls, parseLink,
} = await import('../../bridge/web/js/net/relay-crypto.js');

const v = JSON.parse(readFileSync(process.env.RELAY_VECTORS, 'utf-8'));
const rc = new RelayCrypto(nacl);
const client = { pk: v.client_pk, sk: v.client_sk };
const ephPair = () => nacl.box.keyPair.fromSecretKey(b64decode(v.open.client_eph_sk));

test('the pairing link is read as the daemon wrote it', () => {
  const link = parseLink(v.link_fragment);
  assert.equal(link.host, v.link.host);
  assert.equal(link.url, v.link.url);
  assert.equal(link.pk, v.daemon_pk);
  assert.equal(link.name, v.link.name);
  assert.throws(() => parseLink('not-a-link'), /not an agent-bridge relay pairing link/);
});

test('a link of a relay on several machines lists the other nodes; one without has none', () => {
  const raw = JSON.parse(new TextDecoder().decode(b64decode(v.link_fragment)));
  assert.deepEqual(parseLink(v.link_fragment).urls, []);
  const nodes = [raw.url, 'wss://relay-b.example/nats', 'http://not-a-socket', 7, 'wss://relay-c.example/nats'];
  const link = parseLink(b64encode(new TextEncoder().encode(JSON.stringify({ ...raw, urls: nodes }))));
  assert.equal(link.url, raw.url);
  assert.deepEqual(link.urls, ['wss://relay-b.example/nats', 'wss://relay-c.example/nats']);
  assert.deepEqual(otherUrls({ url: raw.url, urls: 'wss://x' }), []);  // a record without a list
});

test('the pair request box is byte for byte what PyNaCl makes', () => {
  const link = parseLink(v.link_fragment);
  const req = rc.pairRequest(link, client, v.pair.client_name, b64decode(v.pair.n));
  assert.deepEqual(req, { v: 1, pk: v.client_pk, n: v.pair.n, box: v.pair.box });
});

test('the pair reply gives the client id; a reply from another key is refused', () => {
  assert.equal(rc.pairReply(v.pair.reply, v.daemon_pk, client), v.pair.client_id);
  assert.throws(() => rc.pairReply(v.pair.reply, v.other_pk, client), /not from this workstation/);
  assert.throws(() => rc.pairReply({ ok: false, error: 'unknown_secret' }, v.daemon_pk, client), /unknown_secret/);
});

test('the open request and reply: same box, same K, the daemon authenticated', () => {
  const o = v.open;
  const { request, state } = rc.openRequest(v.daemon_pk, client, {
    nowS: o.ts, eph: ephPair(), conn: o.conn, nonce: b64decode(o.n),
  });
  assert.deepEqual(request, { v: 1, pk: v.client_pk, conn: o.conn, eph: o.client_eph_pk, n: o.n, box: o.box });
  const key = rc.openReply(o.reply, v.daemon_pk, client, state);
  assert.equal(b64encode(key), o.key);
  // A reply for another connection, or boxed by someone else, is no proof of the daemon.
  assert.throws(() => rc.openReply(o.reply, v.daemon_pk, client, { ...state, conn: 'f'.repeat(32) }), /does not match/);
  assert.throws(() => rc.openReply(o.reply, v.other_pk, client, state), /not from this workstation/);
  assert.throws(() => rc.openReply({ ok: false, error: 'revoked' }, v.daemon_pk, client, state), (e) => e.code === 'revoked');
});

test('frames sealed by the client equal PyNaCl\'s, counters from 1', () => {
  const s = new Sealer(nacl, b64decode(v.open.key), DIR_UP);
  const got = [
    ...s.sealFrame(v.frames.up_text),
    s.seal(KIND.KEEPALIVE),
    s.sealClose(1000, 'bye'),
  ].map(b64encode);
  assert.deepEqual(got, v.frames.up_sealed);
});

test('frames sealed by the daemon open, a big one joined from its pieces', () => {
  const o = new Opener(nacl, b64decode(v.open.key), DIR_DOWN);
  const out = v.frames.down_sealed.map((m) => o.open(b64decode(m)));
  const frames = out.filter((x) => x?.frame !== undefined).map((x) => x.frame);
  assert.deepEqual(frames, v.frames.down_texts);
  assert.ok(out.some((x) => x?.keepalive));
  assert.deepEqual(out.at(-1), { close: { code: 4401, reason: 'revoked' } });
  for (const m of v.frames.down_sealed) assert.ok(b64decode(m).length <= 8 + 16 + MAX_PLAINTEXT);
});

test('a replayed, reordered or forged frame is rejected', () => {
  const key = b64decode(v.open.key);
  const msgs = v.frames.down_sealed.map(b64decode);
  const replay = new Opener(nacl, key, DIR_DOWN);
  replay.open(msgs[0]);
  assert.throws(() => replay.open(msgs[0]), /counter/);
  const reorder = new Opener(nacl, key, DIR_DOWN);
  reorder.open(msgs[1]);
  assert.throws(() => reorder.open(msgs[0]), /counter/);
  const forged = new Uint8Array(msgs[0]);
  forged[20] ^= 1;
  assert.throws(() => new Opener(nacl, key, DIR_DOWN).open(forged), /bad MAC/);
  // A frame of the other direction (a reflected message) does not open either.
  const up = b64decode(v.frames.up_sealed[0]);
  assert.throws(() => new Opener(nacl, key, DIR_DOWN).open(up), /bad MAC/);
});

test('a gap inside a fragmented frame drops that frame, later frames still arrive', () => {
  const o = new Opener(nacl, b64decode(v.open.key), DIR_DOWN);
  const msgs = v.frames.down_sealed.map(b64decode);
  // down_sealed: [small frame, MORE, MORE, ..., FRAME (the big one), small frame, keepalive, close]
  const bigPieces = v.frames.big_pieces;
  assert.deepEqual(o.open(msgs[0]), { frame: v.frames.down_texts[0] });
  o.open(msgs[1]); // first piece, then one is lost
  const rest = msgs.slice(3).map((m) => o.open(m));
  const frames = rest.filter((x) => x?.frame !== undefined).map((x) => x.frame);
  assert.ok(bigPieces >= 3);
  assert.deepEqual(frames, v.frames.down_texts.slice(2));
});

test('the queue token of a NATS password is the daemon\'s and the relay\'s', () => {
  assert.equal(rc.queueToken(v.queue_token.password), v.queue_token.token);
  assert.equal(v.queue_token.token.length, 32);
});
