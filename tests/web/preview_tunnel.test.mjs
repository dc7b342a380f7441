// net/preview-tunnel.js: a previewed page's request as the HTTP/1.1 bytes its relay stream
// carries, the answer read back however it is framed and however its bytes are cut, and one
// request carried whole over a stand-in relay connection: node --test, run by
// tests/test_web_preview_tunnel.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const { RelayPreview, ResponseReader, requestBytes } = await import('../../bridge/web/js/net/preview-tunnel.js');

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Every event of `answer` fed in pieces of `size` bytes, then the stream's end. */
function readAll(answer, size, method = 'GET') {
  const r = new ResponseReader(method);
  const bytes = encoder.encode(answer);
  const events = [];
  for (let at = 0; at < bytes.length; at += size) events.push(...r.feed(bytes.subarray(at, at + size)));
  events.push(...r.finish());
  const head = events.find((e) => e.head)?.head;
  const body = events.filter((e) => e.chunk).map((e) => decoder.decode(e.chunk)).join('');
  return { head, body, last: events.at(-1) };
}

test('a request: our Host, one request per stream, no compression, the page\'s own headers but no framing or cookie of its own', () => {
  const text = decoder.decode(requestBytes({
    method: 'POST', target: '/api?x=1',
    headers: [['accept', 'application/json'], ['cookie', 'stolen=1'], ['host', 'evil'], ['content-length', '99'], ['x-bad', 'a\r\nInjected: 1']],
    body: encoder.encode('{"a":1}').buffer, cookie: 'abpv_pv_1=KEY; theme=dark',
  }));
  assert.equal(text, 'POST /api?x=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAccept-Encoding: identity\r\n'
    + 'accept: application/json\r\nCookie: abpv_pv_1=KEY; theme=dark\r\nContent-Length: 7\r\n\r\n{"a":1}');
  assert.throws(() => requestBytes({ method: 'GET', target: 'http://elsewhere/' }));
  assert.throws(() => requestBytes({ method: 'GET', target: '/a b' }));
});

test('an answer framed by its length, by chunks, or by the stream\'s end, cut anywhere', () => {
  const chunked = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: s=1; Path=/\r\nContent-Type: text/html\r\n\r\n'
    + '5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n';
  const sized = 'HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found';
  const closed = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end';
  for (const size of [1, 2, 3, 7, 64, 10_000]) {
    const a = readAll(chunked, size);
    assert.equal(a.body, 'hello, world');
    assert.deepEqual(a.last, { end: true });
    assert.equal(a.head.status, 200);
    assert.deepEqual(a.head.headers, [['content-type', 'text/html']]); // framing and cookies stay here
    assert.deepEqual(a.head.cookies, ['s=1; Path=/']);
    const b = readAll(sized, size);
    assert.deepEqual([b.head.status, b.head.statusText, b.body, b.last], [404, 'Not Found', 'not found', { end: true }]);
    const c = readAll(closed, size);
    assert.deepEqual([c.body, c.last], ['until the end', { end: true }]);
  }
  assert.deepEqual(readAll('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n', 3, 'HEAD').last, { end: true });
  assert.deepEqual(readAll('HTTP/1.1 304 Not Modified\r\n\r\n', 3).last, { end: true });
  assert.match(readAll('HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ncut', 4).last.error, /ended early/);
  assert.match(readAll('SSH-2.0-OpenSSH\r\n\r\n', 4).last.error, /not an HTTP answer/);
  assert.match(readAll('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', 4).last.error, /size/);
});

/** A relay connection whose daemon answers every stream with `answers(requestText)`. */
function fakeSocket(answers) {
  const opened = [];
  return {
    opened,
    readyState: 1,
    openStream(preview, { ondata, onend }) {
      let sent = '';
      opened.push(preview);
      return {
        write: (bytes) => {
          sent += decoder.decode(bytes);
          if (!sent.includes('\r\n\r\n')) return;
          for (const piece of answers(sent)) queueMicrotask(() => ondata(encoder.encode(piece)));
          queueMicrotask(() => onend(null));
        },
        end: () => {},
      };
    },
  };
}

class Port {
  constructor() { this.got = []; this.closed = false; this.onmessage = null; }
  postMessage(m) { this.got.push(m); }
  close() { this.closed = true; }
}

test('a request carried whole: the secret asked once and kept here, the dev server\'s cookies kept here, the answer streamed to the port', async () => {
  const seen = [];
  const sock = fakeSocket((req) => {
    seen.push(req);
    if (req.startsWith('GET /__preview/KEY?to=%2F ')) {
      return ['HTTP/1.1 303 See Other\r\nLocation: /\r\nSet-Cookie: abpv_pv_1=KEY; Path=/; HttpOnly\r\nContent-Length: 0\r\n\r\n'];
    }
    return ['HTTP/1.1 200 OK\r\nSet-Cookie: session=abc; Path=/\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhi ', 'ya\r\n0\r\n\r\n'];
  });
  const preview = new RelayPreview({ id: 'pv_1', url: 'http://ws:9/__preview/KEY?to=%2F' }, () => sock);
  const first = new Port();
  await preview.carry({ method: 'GET', target: '/', headers: [] }, first);
  const second = new Port();
  await preview.carry({ method: 'GET', target: '/app.js', headers: [] }, second);
  assert.equal(seen.length, 3); // the secret once, then the two requests
  assert.match(seen[1], /\r\nCookie: abpv_pv_1=KEY\r\n/);
  assert.match(seen[2], /\r\nCookie: abpv_pv_1=KEY; session=abc\r\n/);
  assert.deepEqual(sock.opened, ['pv_1', 'pv_1', 'pv_1']);
  assert.deepEqual(first.got[0], { head: { status: 200, statusText: 'OK', headers: [] } });
  assert.equal(first.got.filter((m) => m.chunk).map((m) => decoder.decode(m.chunk)).join(''), 'hi ya');
  assert.deepEqual(first.got.at(-1), { end: true });
  assert.ok(first.closed && second.closed);
  // no relay connection now: the page gets an error, not a hang
  const away = new RelayPreview({ id: 'pv_2', url: 'http://ws:9/__preview/K2?to=%2F' }, () => null);
  const third = new Port();
  await away.carry({ method: 'GET', target: '/', headers: [] }, third);
  assert.match(third.got[0].error, /cannot be reached/);
});

test('a page that asks for a hundred modules at once: the secret asked once, at most 16 streams open, every one answered', async () => {
  let open = 0;
  let most = 0;
  const entered = [];
  const sock = {
    openStream(preview, { ondata, onend }) {
      open++;
      most = Math.max(most, open);
      let sent = '';
      return {
        write: (bytes) => {
          sent += decoder.decode(bytes);
          const answer = sent.startsWith('GET /__preview/')
            ? (entered.push(1), 'HTTP/1.1 303 See Other\r\nSet-Cookie: abpv_pv_1=KEY\r\nContent-Length: 0\r\n\r\n')
            : `HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok`;
          setTimeout(() => { ondata(encoder.encode(answer)); open--; onend(null); }, 1);
        },
        end: () => {},
      };
    },
  };
  const preview = new RelayPreview({ id: 'pv_1', url: 'http://ws:9/__preview/KEY?to=%2F' }, () => sock);
  const ports = Array.from({ length: 100 }, () => new Port());
  await Promise.all(ports.map((port, i) => preview.carry({ method: 'GET', target: `/m${i}.js`, headers: [] }, port)));
  assert.equal(entered.length, 1);
  assert.ok(most <= 16, `${most} streams at once`);
  for (const port of ports) assert.deepEqual(port.got.at(-1), { end: true });
});

test('a GET whose stream a lost message ended is asked again once; a POST is not', async () => {
  const tries = [];
  const sock = {
    openStream(preview, { ondata, onend }) {
      let sent = '';
      return {
        write: (bytes) => {
          sent += decoder.decode(bytes);
          tries.push(sent.split(' ', 2).join(' '));
          const lost = tries.filter((t) => t === sent.split(' ', 2).join(' ')).length === 1;
          queueMicrotask(() => {
            if (lost) return onend('gap');
            ondata(encoder.encode('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'));
            onend(null);
          });
        },
        end: () => {},
      };
    },
  };
  const preview = new RelayPreview({ id: 'pv_1', url: 'http://ws:9/__preview/KEY?to=%2F' }, () => sock);
  preview.secret = 'abpv_pv_1=KEY';
  const get = new Port();
  await preview.carry({ method: 'GET', target: '/a.js', headers: [] }, get);
  assert.deepEqual(get.got.at(-1), { end: true });
  const post = new Port();
  await preview.carry({ method: 'POST', target: '/api', headers: [], body: new ArrayBuffer(1) }, post);
  assert.match(post.got.at(-1).error, /gap/);
  assert.deepEqual(tries, ['GET /a.js', 'GET /a.js', 'POST /api']);
});

const { FrameReader, OP, closePayload, frameBytes, upgradeBytes } = await import('../../bridge/web/js/net/preview-socket.js');

/** A frame as a server sends it: unmasked, `fin` or not. */
function serverFrame(opcode, payload, fin = true) {
  const n = payload.length;
  const head = n < 126 ? [n] : n < 65536 ? [126, n >> 8, n & 255] : null;
  return new Uint8Array([(fin ? 0x80 : 0) | opcode, ...head, ...payload]);
}

test('WebSocket frames: a masked frame of each size read back, a message in pieces joined, control frames, and what is not framing refused', () => {
  for (const size of [0, 5, 125, 126, 65535, 65536, 200_000]) {
    const payload = new Uint8Array(size).map((_, i) => i * 7);
    const frame = frameBytes(OP.BINARY, payload);
    assert.equal(frame[1] & 0x80, 0x80); // masked, as a browser's are
    const events = [];
    const r = new FrameReader();
    for (let at = 0; at < frame.length; at += 4096) events.push(...r.feed(frame.subarray(at, at + 4096)));
    assert.equal(events.length, 1);
    assert.deepEqual(events[0].binary, payload);
  }
  const r = new FrameReader();
  const got = [
    ...r.feed(serverFrame(OP.TEXT, encoder.encode('re'), false)),
    ...r.feed(serverFrame(OP.PING, encoder.encode('p'))), // between the pieces, as RFC 6455 allows
    ...r.feed(serverFrame(OP.CONTINUATION, encoder.encode('load'))),
    ...r.feed(serverFrame(OP.CLOSE, closePayload(1001, 'going'))),
  ];
  assert.deepEqual(got, [{ ping: encoder.encode('p') }, { text: 'reload' }, { close: { code: 1001, reason: 'going' } }]);
  assert.match(new FrameReader().feed(serverFrame(OP.CONTINUATION, encoder.encode('x')))[0].error, /framing/);
  const big = new Uint8Array([0x82, 127, 0, 0, 0, 0, 0x10, 0, 0, 0]); // 256 MiB said
  assert.match(new FrameReader().feed(big)[0].error, /too large/);
  const up = decoder.decode(upgradeBytes({ target: '/__livereload', protocols: ['vite-hmr', 'bad proto'], cookie: 'abpv_pv_1=KEY', key: 'a2V5' }));
  assert.equal(up, 'GET /__livereload HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
    + 'Sec-WebSocket-Key: a2V5\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: vite-hmr\r\nCookie: abpv_pv_1=KEY\r\n\r\n');
});

test('a previewed page\'s WebSocket carried: the upgrade with the secret, the 101, messages both ways, a ping answered, the server\'s close', async () => {
  const up = [];
  let toPage = null;
  let ended = false;
  const sock = {
    openStream(preview, { ondata, onend }) {
      toPage = { ondata, onend };
      return { write: (bytes) => up.push(bytes), end: () => { ended = true; } };
    },
  };
  const preview = new RelayPreview({ id: 'pv_1', url: 'http://ws:9/__preview/KEY?to=%2F' }, () => sock);
  preview.secret = 'abpv_pv_1=KEY';
  const port = new Port();
  await preview.carrySocket({ type: 'agent-bridge-ws', target: '/__livereload', protocols: [] }, port);
  assert.match(decoder.decode(up[0]), /^GET \/__livereload HTTP\/1\.1\r\n[^]*Upgrade: websocket[^]*Cookie: abpv_pv_1=KEY\r\n\r\n$/);
  toPage.ondata(encoder.encode('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n'));
  toPage.ondata(serverFrame(OP.TEXT, encoder.encode('reload')));
  assert.deepEqual(port.got, [{ open: { protocol: '' } }, { message: 'reload' }]);
  port.onmessage({ data: { send: 'hi' } });
  const sent = new FrameReader().feed(up[1]);
  assert.deepEqual(sent, [{ text: 'hi' }]);
  toPage.ondata(serverFrame(OP.PING, encoder.encode('x')));
  assert.deepEqual(new FrameReader().feed(up[2]), [{ pong: encoder.encode('x') }]);
  toPage.ondata(serverFrame(OP.CLOSE, closePayload(1000, 'bye')));
  assert.deepEqual(port.got.at(-1), { close: { code: 1000, reason: 'bye' } });
  assert.ok(ended && port.closed);
  // refused by the dev server: the page's socket closes with an error
  const refused = new Port();
  await preview.carrySocket({ target: '/nope', protocols: [] }, refused);
  toPage.ondata(encoder.encode('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n'));
  assert.deepEqual(refused.got, [{ close: { code: 1006, reason: 'the dev server answered 404', error: true } }]);
});
