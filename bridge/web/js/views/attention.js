// Attention: the web client as an installed PWA that tells the person when an agent needs them.
//
// - registers the service worker (/sw.js) that shows Web Push notifications;
// - reports presence (`client.presence`) when the page is shown or hidden and when another
//   session is opened, so the daemon does not notify about a session someone is looking at;
// - a settings panel: turn notifications on or off on this device (a Web Push subscription),
//   send a test, and list the channels configured in the daemon's config.toml;
// - opens the session a notification was about (`#session=SID`, or a message from the worker).

import { $, clear, h } from '../ui/dom.js';
import { idb } from '../net/kv.js';

const TOKEN_KEY = 'agent-bridge.token';
function bytesToB64url(bytes) {
  let text = '';
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function b64urlToBytes(text) {
  const pad = '='.repeat((4 - (text.length % 4)) % 4);
  const raw = atob((text + pad).replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

export class Attention {
  constructor(app) {
    this.app = app;
    this.registration = null;
    this.lastReport = null;
  }

  init() {
    document.addEventListener('visibilitychange', () => this.report());
    window.addEventListener('pagehide', () => this.report(false));
    if ('serviceWorker' in navigator) {
      navigator.serviceWorker.addEventListener('message', (ev) => {
        if (ev.data?.type === 'open-session') this.openSession(ev.data.session, ev.data.hash);
      });
      // a module worker (it answers relay notifications itself); a classic one where the
      // browser has no module workers
      navigator.serviceWorker.register('/sw.js', { scope: '/', type: 'module' })
        .catch(() => navigator.serviceWorker.register('/sw-classic.js', { scope: '/' }))
        .then((reg) => { this.registration = reg; this.render(); })
        .catch((err) => { this.workerError = err.message; this.render(); });
    }
    this.render();
  }

  /** A notification was tapped: show its session (one this page may not have listed yet). */
  async openSession(session, hash = '') {
    if (!session) {
      this.app.show(null);
      return;
    }
    // From the page's own daemon, or from the workstation the hash names (`ws`, with an
    // `answer` to give when Allow/Deny was chosen in the notification): route() takes those.
    const params = new URLSearchParams(hash);
    const ws = this.app.stations.get(params.get('ws') || 'local') || this.app.active;
    if (ws && !ws.sessions.has(session) && ws.client.isOpen) await this.app.loadSessions(ws);
    if (params.has('ws')) window.location.hash = params.toString();
    else this.app.open(session, ws);
  }

  /** Tell the daemon whether this page is seen, and which session it shows. */
  report(visible = document.visibilityState === 'visible') {
    const client = this.app.client;
    if (!client?.isOpen) return;
    const session = visible ? (this.app.current?.id ?? null) : null;
    const key = `${visible}:${session}`;
    if (key === this.lastReport) return;
    this.lastReport = key;
    client.request('client.presence', { visible, session }).catch(() => { this.lastReport = null; });
  }

  onOpen() {
    this.lastReport = null;
    this.report();
    this.loadChannels();
  }

  async forget() {
    this.lastReport = null;
    await idb('readwrite', (s) => s.delete('token')).catch(() => {});
  }

  async subscription() {
    const reg = this.registration || await navigator.serviceWorker?.getRegistration('/');
    return reg?.pushManager ? reg.pushManager.getSubscription() : null;
  }

  async enable() {
    const status = $('#notify-status');
    try {
      const permission = await Notification.requestPermission();
      if (permission !== 'granted') throw new Error('notifications are blocked for this site in the browser');
      const reg = await navigator.serviceWorker.ready;
      // One subscription per browser, signed for by every workstation: with this browser's own
      // VAPID key, which each of them gets sealed (docs/security.md, "Pushes from every
      // workstation").
      const key = await this.browserKey();
      let sub = await reg.pushManager.getSubscription();
      if (sub && !this.sameKey(sub, key.public)) { await sub.unsubscribe(); sub = null; }
      sub = sub || await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64urlToBytes(key.public) });
      const told = await this.tellAll(sub, key);
      // Answering from a notification needs the token: kept only where the page keeps it too.
      const remembered = localStorage.getItem(TOKEN_KEY);
      if (remembered) await idb('readwrite', (s) => s.put(remembered, 'token'));
      status.textContent = `Notifications are on for this device (${told} workstation${told === 1 ? '' : 's'}).`;
    } catch (err) {
      status.textContent = `Could not turn notifications on: ${err.message}`;
    }
    this.render();
  }

  /** This browser's VAPID key pair (made once, kept in IndexedDB): {public, private} base64url. */
  async browserKey() {
    const kept = await idb('readonly', (st) => st.get('vapid')).catch(() => null);
    if (kept?.public && kept?.private) return kept;
    const pair = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign']);
    const raw = new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey));
    const jwk = await crypto.subtle.exportKey('jwk', pair.privateKey);
    const made = { public: bytesToB64url(raw), private: jwk.d };
    await idb('readwrite', (st) => st.put(made, 'vapid'));
    return made;
  }

  /** Each connected workstation gets the subscription and the key to sign for it; the count. */
  async tellAll(sub, key) {
    let told = 0;
    for (const ws of this.app.stations.values()) {
      if (await this.tell(ws, sub, key)) told++;
    }
    return told;
  }

  async tell(ws, sub, key) {
    if (!ws.client.isOpen) return false;
    const fields = { subscription: sub.toJSON(), vapid_key: key.private };
    if (ws.id !== 'local') fields.ws = ws.id; // its notifications open it, not the page's own
    try {
      await ws.client.request('webpush.subscribe', fields);
      return true;
    } catch {
      return false; // an older daemon, or one that refuses: the others still notify
    }
  }

  /** A workstation (re)connected: it gets this browser's subscription when notifications are on. */
  async onStation(ws) {
    const sub = await this.subscription().catch(() => null);
    const key = await idb('readonly', (st) => st.get('vapid')).catch(() => null);
    if (sub && key?.private && this.sameKey(sub, key.public)) await this.tell(ws, sub, key);
  }

  sameKey(sub, key) {
    const mine = sub.options?.applicationServerKey;
    if (!mine) return true;
    const a = new Uint8Array(mine);
    const b = b64urlToBytes(key);
    return a.length === b.length && a.every((x, i) => x === b[i]);
  }

  async disable() {
    const sub = await this.subscription();
    if (sub) {
      for (const ws of this.app.stations.values()) {
        if (ws.client.isOpen) await ws.client.request('webpush.unsubscribe', { endpoint: sub.endpoint }).catch(() => {});
      }
      await sub.unsubscribe();
    }
    await this.forget();
    $('#notify-status').textContent = 'Notifications are off for this device.';
    this.render();
  }

  async test() {
    const status = $('#notify-status');
    const sub = await this.subscription().catch(() => null);
    try {
      const { results } = await this.app.client.request('notify.test', sub ? { endpoint: sub.endpoint } : {});
      if (!results.length) {
        status.textContent = 'No channel to test: turn notifications on here, or add [[notify.targets]] to config.toml.';
        return;
      }
      clear(status).append(...results.map((r) => h('div', { class: r.ok ? 'check-pass' : 'check-fail' },
        `${r.ok ? '✓' : '✗'} ${r.channel}: ${r.answer}`)));
    } catch (err) {
      status.textContent = `Test failed: ${err.message}`;
    }
  }

  async loadChannels() {
    const list = $('#notify-channels');
    if (!list || !this.app.client?.isOpen) return;
    try {
      const info = await this.app.client.request('notify.channels');
      clear(list).append(
        ...info.channels.map((c) => h('li', { class: 'small' },
          h('b', {}, c.name), ' ', h('span', { class: 'muted' }, c.kinds.join(', ')))),
        ...info.problems.map((p) => h('li', { class: 'small error-text' }, p)),
      );
      $('#notify-channels-empty').hidden = info.channels.length + info.problems.length > 0;
      $('#notify-devices').textContent = `${info.webpush.subscriptions} device(s) get Web Push notifications.`;
    } catch (err) {
      list.textContent = err.message;
    }
  }

  async render() {
    const toggle = $('#notify-toggle');
    if (!toggle) return;
    const supported = 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
    if (!supported || this.workerError) {
      toggle.disabled = true;
      toggle.textContent = 'Notifications unavailable here';
      $('#notify-status').textContent = this.workerError || (window.isSecureContext
        ? 'This browser cannot receive push notifications (on iOS: add the page to the home screen first).'
        : 'Push notifications need the page over https:// (or on localhost); the daemon\'s channels still work.');
      return;
    }
    const sub = await this.subscription().catch(() => null);
    toggle.disabled = false;
    toggle.textContent = sub ? 'Turn off on this device' : 'Turn on for this device';
    toggle.onclick = () => (sub ? this.disable() : this.enable());
    $('#notify-test').onclick = () => this.test();
  }
}
