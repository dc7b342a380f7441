// The service worker of the previews' own origin (docs/protocol.md, "Preview through the
// relay"): every request of a previewed page on this origin is answered from the dev server,
// carried by the web client's page. The worker hands each request, with a MessagePort for its
// answer, to the bootstrap page (which holds the web client's port, and outlives this worker,
// which the browser may stop when idle), and streams the answer back as it comes:
// {head: {status, statusText, headers}}, then {chunk: ArrayBuffer}…, then {end: true}, or
// {error: text} at any point. A page it serves gets one script first (right after its
// doctype): /__agent-bridge/ws.js, which carries the page's WebSockets to its own host the
// same way (a service worker cannot answer a WebSocket).

const OWN = '/__agent-bridge/';
const PAGE = OWN + 'preview';
const NULL_BODY = new Set([101, 103, 204, 205, 304]);
const SOCKETS = new TextEncoder().encode(`<script src="${OWN}ws.js"></script>`);
/** How much of a page is looked at for its doctype (the script goes after it: not before,
 *  which would put the page in quirks mode). */
const HEAD_LOOK = 1024;

function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** What adds the script to a page's first bytes: `take(chunk, last)` returns what to send. */
function injector() {
  let head = new Uint8Array(0);
  let done = false;
  return (chunk, last = false) => {
    if (done) return [chunk];
    head = concat(head, chunk);
    if (head.length < HEAD_LOOK && !last) return [];
    done = true;
    // bytes as Latin-1 characters, so that an index is a byte offset
    const text = String.fromCharCode(...head.subarray(0, HEAD_LOOK));
    const doctype = /^(?:\xEF\xBB\xBF)?\s*<!doctype[^>]*>/i.exec(text);
    const at = doctype ? doctype[0].length : 0;
    return [head.subarray(0, at), SOCKETS, head.subarray(at)];
  };
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  // another origin's request (a CDN's script) is the browser's own; ours come from the relay
  if (url.origin !== self.location.origin || url.pathname.startsWith(OWN)) return;
  event.respondWith(carry(event.request, url));
});

/** The bootstrap page framed last (its `at`): the web client shows one preview at a time. */
async function bootstrap() {
  const pages = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  let last = null;
  let lastAt = -1;
  for (const page of pages) {
    const url = new URL(page.url);
    const at = Number(url.searchParams.get('at')) || 0;
    if (url.pathname === PAGE && at >= lastAt) [last, lastAt] = [page, at];
  }
  return last;
}

function failed(text, status = 502) {
  return new Response(`${text}\n`, { status, headers: { 'Content-Type': 'text/plain; charset=utf-8' } });
}

async function carry(request, url) {
  const page = await bootstrap();
  if (!page) return failed('this preview is not open in agent-bridge');
  const body = ['GET', 'HEAD'].includes(request.method) ? null : await request.arrayBuffer();
  const { port1, port2 } = new MessageChannel();
  const message = {
    type: 'agent-bridge-fetch',
    method: request.method,
    target: url.pathname + url.search,
    headers: [...request.headers],
    body,
  };
  return new Promise((resolve) => {
    let controller = null;
    let answered = false;
    let inject = null;
    const stream = new ReadableStream({
      start(c) { controller = c; },
      cancel() { port1.postMessage({ cancel: true }); port1.close(); },
    });
    port1.onmessage = ({ data }) => {
      if (data?.head && !answered) {
        answered = true;
        const { status, statusText, headers } = data.head;
        const none = NULL_BODY.has(status) || request.method === 'HEAD';
        const type = headers.find(([k]) => k.toLowerCase() === 'content-type')?.[1] || '';
        if (request.mode === 'navigate' && /^text\/html/i.test(type) && !none) inject = injector();
        try {
          resolve(new Response(none ? null : stream, { status, statusText, headers }));
        } catch (err) {
          resolve(failed(`the dev server's answer cannot be shown: ${err.message}`));
        }
        if (none) port1.close();
      } else if (data?.chunk) {
        const chunk = new Uint8Array(data.chunk);
        for (const piece of inject ? inject(chunk) : [chunk]) if (piece.length) controller.enqueue(piece);
      } else if (data?.end) {
        for (const piece of inject ? inject(new Uint8Array(0), true) : []) if (piece.length) controller.enqueue(piece);
        controller.close();
        port1.close();
      } else if (data?.error) {
        if (!answered) {
          answered = true;
          resolve(failed(data.error));
        } else {
          controller.error(new Error(data.error));
        }
        port1.close();
      }
    };
    page.postMessage(message, body ? [port2, body] : [port2]);
  });
}
