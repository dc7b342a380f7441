// The bootstrap of a preview through the relay (docs/protocol.md, "Preview through the
// relay"). This page is on the previews' own origin, framed by the web client: it installs
// the service worker that answers every request of the previewed page, takes a MessagePort
// from the web client (its origin only, checked), and then shows the previewed page in a frame
// of its own. Each request the worker gets comes here with a port for its answer and goes on,
// port and all, to the web client, which carries it sealed to the daemon's preview proxy and
// answers on that port; the page's WebSockets to its own host (ws.js) go the same way. No
// key, cookie or byte of the page stays here.

const CLIENT = document.documentElement.dataset.client;
const WORKER = '/__agent-bridge/sw.js';
let toClient = null;
let frame = null;

function show(path) {
  if (!frame) {
    frame = document.createElement('iframe');
    frame.title = 'Preview';
    Object.assign(frame.style, { border: '0', width: '100%', height: '100%', display: 'block' });
    Object.assign(document.documentElement.style, { height: '100%' });
    Object.assign(document.body.style, { margin: '0', height: '100%' });
    document.body.append(frame);
  }
  frame.src = path;
}

/** A request of the previewed page, from the worker: on to the web client with its answer port. */
function onRequest(ev) {
  const [answer] = ev.ports;
  if (ev.data?.type !== 'agent-bridge-fetch' || !answer) return;
  if (!toClient) {
    answer.postMessage({ error: 'the web client has not opened this preview yet' });
    return;
  }
  const transfer = ev.data.body ? [answer, ev.data.body] : [answer];
  toClient.postMessage(ev.data, transfer);
}

window.addEventListener('message', (ev) => {
  // a WebSocket of the previewed page (ws.js, this origin): on to the web client with its port
  if (ev.origin === location.origin && ev.data?.type === 'agent-bridge-ws' && ev.ports[0]) {
    if (toClient) toClient.postMessage(ev.data, [ev.ports[0]]);
    else ev.ports[0].postMessage({ close: { code: 1006, reason: 'not open yet', error: true } });
    return;
  }
  if (ev.source !== window.parent || ev.origin !== CLIENT) return;
  if (ev.data?.type !== 'agent-bridge-preview-port' || !ev.ports[0]) return;
  toClient?.close();
  [toClient] = ev.ports;
  // the web client's Reload: the previewed page again, this page and its worker as they are
  toClient.onmessage = (msg) => {
    if (msg.data?.type === 'agent-bridge-preview-show') showPath(msg.data.path);
  };
  showPath(ev.data.path);
});

function showPath(path) {
  // a path of this origin only, never another host's (`//host`)
  show(typeof path === 'string' && /^\/(?![/\\])/.test(path) ? path : '/');
}

async function start() {
  try {
    if (!navigator.serviceWorker) throw new Error('service workers are off in this context');
    navigator.serviceWorker.onmessage = onRequest;
    await navigator.serviceWorker.register(WORKER, { scope: '/', updateViaCache: 'none' });
    await navigator.serviceWorker.ready;
    window.parent.postMessage({ type: 'agent-bridge-preview-ready' }, CLIENT);
  } catch (err) {
    // no service worker here: over plain HTTP beyond the loopback, or a browser that keeps none
    const reason = String(err?.message || err);
    document.body.textContent = `This preview cannot start here (it needs a service worker over HTTPS): ${reason}`;
    window.parent.postMessage({ type: 'agent-bridge-preview-failed', reason }, CLIENT);
  }
}

start();
