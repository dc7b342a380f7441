// The web client's service worker, all but its relay part: keeps the page's own files (the
// app shell) so that a page opened again shows its list without a round trip per file, shows
// the daemons' Web Push notifications and opens the session a notification is about. A
// classic script, so that it runs both inside the module worker
// (sw.js, which adds answering through the relay) and, in a browser without module workers,
// on its own (sw-classic.js).
//
// A push carries the notification payload as JSON (docs/notifications.md):
// {kind, title, body, session, agent, url, request_id?, options?, count?, ws?}.
// A permission notification offers the request's options as actions where the browser shows
// actions; choosing one answers the request: over the WebSocket with the token the page stored
// for this purpose (IndexedDB, only when "remember on this device" was chosen), or, from a
// workstation reached through the relay (`ws`), through the relay with this browser's keys for
// it (`self.answerThroughRelay`, js/net/relay-answer.js). Without either, or when that fails, or on a
// plain tap, the session opens with the prompt in view (already answering it after a choice).

const DB = 'agent-bridge';
const STORE = 'kv';

// The app shell: every file of the client (tests/test_web_static.py checks the list against
// bridge/web). Served from the cache at once and fetched again behind it (stale while
// revalidate): a page opened again shows what it was, and the next one what the server has
// now. Nothing else is cached: not /healthz, not the WebSocket, nothing of another origin.
const SHELL_CACHE = 'agent-bridge-shell-1';
const SHELL = [
  '/', '/index.html', '/app.css', '/manifest.webmanifest', '/icon.svg', '/icon-192.png', '/icon-512.png',
  '/js/app.js', '/js/nav.js',
  '/js/net/kv.js', '/js/net/outbox.js', '/js/net/preview-socket.js', '/js/net/preview-tunnel.js',
  '/js/net/protocol.js', '/js/net/relay-answer.js', '/js/net/relay-crypto.js', '/js/net/relay.js', '/js/net/workstations.js',
  '/js/ui/address.js', '/js/ui/diff.js', '/js/ui/dom.js', '/js/ui/icons.js', '/js/ui/markdown.js',
  '/js/ui/session-state.js', '/js/ui/toast.js', '/js/ui/transcript.js',
  '/js/views/attention.js', '/js/views/login.js', '/js/views/session.js', '/js/views/sessions.js',
  '/js/views/checks.js', '/js/views/preview.js', '/js/views/search.js', '/js/views/settings.js',
  '/js/views/ship.js', '/js/views/usage.js',
  '/js/views/steer.js', '/js/views/workspace.js',
  '/vendor/nats.ws/nats.js', '/vendor/tweetnacl/nacl-fast.js',
];

self.addEventListener('install', (event) => {
  // a shell that cannot be fetched now (offline) is fetched as the page asks for it
  keep(event, caches.open(SHELL_CACHE).then((cache) => cache.addAll(SHELL)).catch(() => {})
    .then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  keep(event, caches.keys()
    .then((names) => Promise.all(names.filter((n) => n.startsWith('agent-bridge-shell-') && n !== SHELL_CACHE)
      .map((n) => caches.delete(n))))
    .then(() => self.clients.claim()));
});

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin) return;
  if (!SHELL.includes(url.pathname)) return;
  const answer = fromShell(url.pathname);
  event.respondWith(answer.then((a) => a.response));
  keep(event, answer.then((a) => a.refreshed).catch(() => {})); // the cache, behind the answer
});

/** The cached file at once (else the network's), and the cache refreshed from the network. */
async function fromShell(path) {
  const cache = await caches.open(SHELL_CACHE);
  const cached = await cache.match(path);
  const fetched = fetch(path, { cache: 'no-cache', credentials: 'same-origin' });
  const refreshed = fetched.then((res) => (res.ok && !res.redirected ? cache.put(path, res.clone()) : null));
  if (cached) return { response: cached, refreshed };
  // cloned for the cache before the page reads the body
  const response = refreshed.then(() => fetched, () => fetched);
  return { response, refreshed };
}

function keep(event, promise) {
  // Events the worker is given for real can be extended; dispatched ones cannot.
  try { event.waitUntil(promise); } catch { /* not extendable */ }
  return promise;
}

self.addEventListener('push', (event) => {
  let data;
  try {
    data = event.data ? event.data.json() : null;
  } catch {
    data = null;
  }
  if (!data || !data.title) data = { kind: 'unknown', title: 'agent-bridge', body: event.data?.text() || '', url: '/' };
  keep(event, show(data));
});

function show(data) {
  const options = {
    body: data.body || '',
    tag: data.session ? `${data.session}:${data.kind}` : undefined,
    renotify: Boolean(data.session),
    icon: '/icon-192.png',
    badge: '/icon-192.png',
    data,
    requireInteraction: data.kind === 'permission',
    timestamp: Date.now(),
  };
  const max = self.Notification?.maxActions ?? 0;
  if (data.kind === 'permission' && Array.isArray(data.options) && max > 0) {
    const order = ['allow_once', 'reject_once', 'allow_always', 'reject_always'];
    const sorted = [...data.options].sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
    options.actions = sorted.slice(0, max).map((o) => ({ action: o.id, title: o.label }));
  }
  return self.registration.showNotification(data.title, options);
}

self.addEventListener('notificationclick', (event) => {
  const notification = event.notification;
  const data = notification.data || {};
  notification.close();
  let work;
  if (!event.action || !data.request_id) work = openSession(data);
  // From a workstation this page reaches through the relay (`ws`): answered through the relay
  // here where the worker can (a module worker); else the page opens and answers at once.
  else if (data.ws) {
    work = answerRelayed(data, event.action)
      .catch(() => openSession(data, `${data.request_id}:${event.action}`));
  } else work = answer(data, event.action).catch(() => openSession(data));
  keep(event, work);
});

async function openSession(data, answerWith = null) {
  const url = new URL(data.url || '/', self.location.origin);
  const hash = new URLSearchParams(url.hash.slice(1));
  if (answerWith) hash.set('answer', answerWith);
  // Only ever open this origin's own client, whatever a payload says.
  const target = new URL(hash.toString() ? `#${hash}` : '/', self.location.origin).href;
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const existing = windows.find((w) => new URL(w.url).origin === self.location.origin);
  if (existing) {
    existing.postMessage({ type: 'open-session', session: data.session || null, hash: hash.toString() });
    try { await existing.focus(); } catch { /* focus needs the click's activation */ }
    return existing;
  }
  return self.clients.openWindow(target);
}

async function answerRelayed(data, optionId) {
  if (typeof self.answerThroughRelay !== 'function') throw new Error('no relay in this worker');
  await self.answerThroughRelay(data.ws, data.session, data.request_id, optionId);
}

function readToken() {
  return new Promise((resolve) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onerror = () => resolve(null);
    req.onsuccess = () => {
      const get = req.result.transaction(STORE).objectStore(STORE).get('token');
      get.onsuccess = () => resolve(get.result || null);
      get.onerror = () => resolve(null);
    };
  });
}

async function answer(data, optionId) {
  const token = await readToken();
  if (!token) throw new Error('no stored token');
  const scheme = self.location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${scheme}//${self.location.host}/v1/ws`, ['bridge.v1.json']);
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout')), 10_000);
    ws.onerror = () => { clearTimeout(timer); reject(new Error('cannot connect')); };
    ws.onclose = () => { clearTimeout(timer); reject(new Error('closed')); };
    ws.onopen = () => ws.send(JSON.stringify({
      t: 'hello', id: 1, protocol: 1, token, client: { name: 'agent-bridge notification', version: '1' },
    }));
    ws.onmessage = (ev) => {
      const frame = JSON.parse(ev.data);
      if (frame.id === 1 && frame.t === 'ok') {
        ws.send(JSON.stringify({
          t: 'session.permission', id: 2, session: data.session, request_id: data.request_id, option_id: optionId,
        }));
      } else if (frame.id === 2) {
        clearTimeout(timer);
        ws.onclose = null;
        ws.close();
        if (frame.t === 'ok') resolve();
        else reject(new Error(frame.message));
      } else if (frame.t === 'err') {
        clearTimeout(timer);
        reject(new Error(frame.message));
      }
    };
  });
}
