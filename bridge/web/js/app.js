// The web client's shell: the workstations this browser reaches, which one is active, and
// which view the page shows. The views live in views/ (one module each), the protocol and the
// relay in net/, the rendering helpers in ui/; `window.agentBridge` exposes the live objects
// for the curious. The layers (docs/web-client.md, "Modules") are checked by
// tests/web/layers.test.mjs.
//
// Every workstation in one client (net/workstations.js): the page's own daemon (token) and any
// others (paired through a relay, or another daemon's token link) each have a client; the
// session list shows them all, grouped by workstation. One workstation is "active" at a
// time: the one whose session is open and on which the new-session form creates sessions;
// `app.client`, `app.agents` and `app.sessions` are the active workstation's.

import { $ } from './ui/dom.js';
import { readFragment, writeFragment } from './ui/address.js';
import { toast } from './ui/toast.js';
import {
  LOCAL, Workstation, deviceName, directRecord, forgetRecord, loadRecords, saveRecord,
} from './net/workstations.js';
import { Outbox } from './net/outbox.js';
import { Attention } from './views/attention.js';
import { CWD_KEY, SessionsView } from './views/sessions.js';
import { SessionView } from './views/session.js';
import { SettingsView } from './views/settings.js';
import { LoginView, forgetToken, saveToken, takeToken } from './views/login.js';
import { Navigation } from './nav.js';
import * as search from './views/search.js';
import * as usage from './views/usage.js';

const NO_SESSIONS = new Map();
const DIFF_KEY = 'agent-bridge.diff';
const LIST_REFRESH_MS = 15_000;
const phoneQuery = window.matchMedia('(max-width: 760px)');

class App {
  constructor() {
    this.stations = new Map(); // id -> Workstation, in the order they are listed
    this.active = null;
    this.relay = null; // net/relay.js, loaded when the first relay workstation appears
    this.views = new Map();
    this.outbox = new Outbox();
    this.outbox.addEventListener('change', () => this.list.render());
    this.current = null;
    this.refreshTimer = null;
    this.countdown = null;
    this.attention = new Attention(this);
    this.list = new SessionsView(this);
    this.settings = new SettingsView(this);
    this.login = new LoginView(this);
    this.nav = new Navigation(this);
  }

  get client() {
    return this.active?.client ?? null;
  }

  get agents() {
    return this.active?.agents ?? new Map();
  }

  set agents(map) {
    if (this.active) this.active.agents = map;
  }

  get sessions() {
    return this.active?.sessions ?? NO_SESSIONS;
  }

  set sessions(map) {
    if (this.active) this.active.sessions = map;
  }

  cwdKey(ws = this.active) {
    return !ws || ws.id === LOCAL ? CWD_KEY : `${CWD_KEY}.${ws.id}`;
  }

  init() {
    this.login.init();
    this.list.init();
    this.settings.init();
    search.mount(this, $('#search-mount'));
    usage.mount(this, $('#usage-mount'));
    $('#logout').addEventListener('click', () => this.signOut());
    this.nav.init();
    $('#conn').addEventListener('click', () => this.client?.nudge());
    window.addEventListener('hashchange', () => {
      // A pairing link opened in a tab that already shows the client.
      if (readFragment().has('relay')) this.pairFromFragment();
      else if (readFragment().has('token')) this.connect(takeToken());
      else this.route();
    });
    window.addEventListener('online', () => this.client?.nudge());
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') this.client?.nudge();
    });
    this.attention.init();
    // what an earlier page left waiting: shown in its session, sent where a workstation is up
    this.outbox.load().then(() => {
      if (this.current) this.current.showWaiting();
      // a session whose workstation is away opens from its waiting messages (when it is
      // reachable, onOpen routes once the lists are in: routing now would find none)
      else if (!this.client?.isOpen) this.route();
      for (const ws of this.stations.values()) if (ws.client.isOpen) this.flushOutbox(ws);
    });
    const token = takeToken();
    const records = loadRecords();
    this.restoring = true;
    if (token) this.connect(token);
    this.restore(records).then(() => {
      this.restoring = false;
      this.route(); // a #ws=… fragment (a reload) names a workstation only now restored
      if (readFragment().has('relay')) return this.pairFromFragment();
      if (!this.stations.size) this.login.show();
      return undefined;
    });
  }

  // ---- workstations --------------------------------------------------------------------------

  async relayModule() {
    if (!this.relay) this.relay = await import('./net/relay.js');
    return this.relay;
  }

  /** The stored workstations (all but the page's own daemon), started. */
  async restore(records) {
    for (const record of records) {
      try {
        const relay = record.kind === 'relay' ? await this.relayModule() : null;
        this.addStation(Workstation.fromRecord(record, relay));
      } catch (err) {
        toast(`Could not load workstation ${record.name}: ${err.message}`);
      }
    }
  }

  addStation(ws) {
    const old = this.stations.get(ws.id);
    if (old) this.removeStation(old, false);
    if (ws.id === LOCAL) this.stations = new Map([[LOCAL, ws], ...this.stations]);
    else this.stations.set(ws.id, ws);
    ws.client.addEventListener('status', (ev) => {
      for (const view of this.views.values()) if (view.ws === ws) view.renderHeader();
      this.relayOutbox(ws);
      if (ws === this.active) this.setConn(ev.detail);
      else if (ev.detail.state === 'unauthorized' && ws.kind === 'relay') {
        toast(`${ws.name}: ${ev.detail.reason || 'this browser is no longer paired'}`);
      }
      this.renderStations();
    });
    ws.client.addEventListener('open', () => this.onStationOpen(ws));
    ws.client.addEventListener('agents_changed', () => {
      // A new adapter may also bring sessions started in its terminal.
      this.loadAgents(ws);
      this.loadSessions(ws);
    });
    ws.station?.addEventListener('relay', () => this.renderStations());
    if (!this.active) this.setActive(ws);
    this.login.hide();
    $('#logout').hidden = !this.stations.has(LOCAL);
    this.layout();
    ws.start();
    this.renderStations();
  }

  removeStation(ws, forget = true) {
    ws.stop();
    this.stations.delete(ws.id);
    if (forget && ws.id !== LOCAL) forgetRecord(ws.id);
    for (const [key, view] of this.views) {
      if (view.ws === ws) {
        view.el.remove();
        this.views.delete(key);
      }
    }
    if (this.current?.ws === ws) this.current = null;
    if (this.active === ws) {
      this.active = null;
      const next = this.stations.values().next().value;
      if (next) this.setActive(next);
      else this.setConn({ state: 'stopped' });
      const params = readFragment();
      params.delete('session');
      params.delete('ws');
      writeFragment(params);
    }
    $('#logout').hidden = !this.stations.has(LOCAL);
    $('#pane-empty').hidden = Boolean(this.current);
    this.renderStations();
    if (!this.stations.size) this.login.show();
  }

  /** Make `ws` the one whose sessions open and on which new sessions start. */
  setActive(ws) {
    if (this.active === ws) return;
    if (this.current) {
      this.current.leave();
      this.current.el.remove();
      this.current = null;
    }
    this.active = ws;
    this.setConn(ws.client.status);
    this.list.activate(ws);
    this.fillAgents(ws);
  }

  /** What waited for `ws` goes now, in order (js/outbox.js); an open view shows each go. */
  flushOutbox(ws) {
    return this.outbox.flush(ws, this.outboxHooks(ws));
  }

  /** What an open view shows as each of `ws`'s waiting messages goes (or goes on the relay). */
  outboxHooks(ws) {
    return (e) => {
      const view = this.views.get(`${ws.id}\n${e.session}`);
      const pending = view?.pendings.get(e.id);
      return pending ? view.sentHooks(pending, e.text) : {};
    };
  }

  /** `ws` is away behind a relay that is up: what waits for it goes onto the relay's queue. */
  relayOutbox(ws) {
    if (ws.kind !== 'relay' || ws.state !== 'offline') return;
    this.outbox.relay(ws, this.outboxHooks(ws));
  }

  async onStationOpen(ws) {
    this.attention.onStation(ws);
    this.flushOutbox(ws);
    if (ws === this.active) {
      await this.onOpen();
      return;
    }
    await Promise.all([this.loadAgents(ws), this.loadSessions(ws)]);
  }

  /** A pasted link: `…#relay=…` pairs, `…#token=…` signs in here or adds another daemon. */
  addFromLink(text) {
    let url;
    try {
      url = new URL(text, window.location.href);
    } catch {
      url = null;
    }
    const params = new URLSearchParams(url ? url.hash.slice(1) : '');
    if (params.has('relay')) {
      this.pairWith(params.get('relay'));
    } else if (params.has('token') && url.origin === window.location.origin) {
      saveToken(params.get('token'), true);
      this.connect(params.get('token'));
    } else if (params.has('token')) {
      const record = directRecord(url.href);
      saveRecord(record);
      this.addStation(Workstation.fromRecord(record, null));
      toast(`Added ${record.name}.`, 'info');
    } else if (/^[A-Za-z0-9_-]{40,}$/.test(text)) {
      this.pairWith(text); // the value of a #relay= link on its own
    } else {
      toast('That is not a pairing link: run `agent-bridge pair --relay` (or `agent-bridge pair`) on the workstation.');
    }
  }

  pairFromFragment() {
    const params = readFragment();
    const value = params.get('relay');
    // The link holds a one-time secret: out of the address bar and history at once.
    params.delete('relay');
    writeFragment(params);
    if (value) this.pairWith(value);
  }

  async pairWith(value) {
    const say = (text, error = false, fades = false) => this.settings.sayPairing(text, { error, fades });
    let relay;
    let link;
    try {
      relay = await this.relayModule();
      link = relay.parseLink(value);
    } catch (err) {
      if (!this.stations.size) this.login.show();
      say(`Could not pair: ${err.message}`, true);
      return;
    }
    say(`Pairing with ${link.name} through ${link.url}…`);
    if (!this.stations.size) {
      $('#login').hidden = false;
      $('#main').hidden = true;
    }
    try {
      const record = await relay.pair(link, deviceName(navigator.userAgent, navigator.platform));
      saveRecord(record);
      const ws = Workstation.fromRecord(record, relay);
      this.addStation(ws);
      this.show(null, ws);
      say(`Paired with ${record.name}.`, false, true);
      toast(`Paired with ${record.name}.`, 'info');
    } catch (err) {
      const known = this.stations.get(`relay:${link.host}`);
      if (err.code === 'unknown_secret' && known?.record?.pk === link.pk) {
        // the link this browser paired with, opened again: nothing is wrong
        say(`This browser is already paired with ${known.name}.`, false, true);
        this.show(null, known);
        return;
      }
      const why = err.code === 'unknown_secret'
        ? 'the pairing link was already used or has expired: run `agent-bridge pair --relay` again'
        : err.message;
      if (!this.stations.size) this.login.show();
      say(`Could not pair with ${link.name}: ${why}`, true);
    }
  }

  /** The workstations section, the groups' states and the new-session form's choice. */
  renderStations() {
    this.settings.renderStations();
    this.list.renderStations();
    this.list.render();
  }

  showNewSession() {
    this.list.showNewSession();
  }

  renderSessions() {
    this.list.render();
  }

  updateListItem(session, ws) {
    this.list.updateListItem(session, ws);
  }

  signOut() {
    forgetToken();
    this.attention.forget();
    this.disconnect();
    if (this.stations.size) {
      this.route();
      return;
    }
    this.setConn({ state: 'stopped' });
    $('#logout').hidden = true;
    this.login.show();
  }

  /** Stop the page's own daemon's client (sign-out, or a new token). */
  disconnect() {
    const local = this.stations.get(LOCAL);
    if (local) this.removeStation(local, false);
    $('#logout').hidden = true;
  }

  connect(token) {
    const previous = this.stations.get(LOCAL);
    const wasActive = !previous || this.active === previous;
    this.disconnect();
    const ws = Workstation.local(token);
    if (wasActive && this.active) {
      this.active = null;
      this.current?.leave();
      this.current?.el.remove();
      this.current = null;
    }
    this.addStation(ws);
    if (wasActive) this.setActive(ws);
    this.route();
  }

  setConn(status) {
    const el = $('#conn');
    el.dataset.state = status.state;
    clearInterval(this.countdown);
    const label = el.querySelector('span');
    const text = {
      connecting: 'Connecting…',
      open: 'Connected',
      unauthorized: 'Token rejected',
      stopped: 'Not connected',
    }[status.state];
    const relayDown = this.active?.kind === 'relay' && this.active.state === 'relay_down';
    if (status.state === 'waiting') {
      const until = Date.now() + status.retryInMs;
      const what = relayDown ? 'Relay down' : status.refused ? 'Refused' : 'Offline';
      // the countdown goes in the title: a phone's top bar has room for the state alone
      const tick = () => {
        const s = Math.max(0, Math.ceil((until - Date.now()) / 1000));
        label.textContent = phoneQuery.matches ? what : (s ? `${what} · retrying in ${s} s` : `${what} · retrying…`);
        el.title = s ? `retrying in ${s} s; click to retry now` : 'retrying…';
      };
      tick();
      this.countdown = setInterval(tick, 1000);
    } else {
      // a relay that is down reads the same in the top bar as in the groups
      label.textContent = status.state === 'connecting' && relayDown ? 'Relay down' : (text || status.state);
      el.title = '';
    }
    if (status.state === 'unauthorized' && this.active?.kind === 'relay') {
      label.textContent = /revoked/i.test(status.reason || '') ? 'Revoked' : 'Not paired';
      el.title = status.reason || '';
      return;
    }
    if (status.state === 'unauthorized') {
      forgetToken();
      $('#logout').hidden = true;
      this.login.show('The daemon rejected this token. Check it with `agent-bridge token`.');
    }
  }

  async onOpen() {
    await Promise.all([this.loadAgents(), this.loadSessions(), this.list.projects.load()]);
    this.list.fillCwd();
    clearInterval(this.refreshTimer);
    this.refreshTimer = setInterval(() => {
      if (document.visibilityState !== 'visible') return;
      for (const ws of this.stations.values()) if (ws.client.isOpen) this.loadSessions(ws);
    }, LIST_REFRESH_MS);
    this.route();
    this.attention.onOpen();
  }

  // ---- agents and the new-session form -------------------------------------------------------

  async loadAgents(ws = this.active) {
    if (!ws) return;
    let agents;
    try {
      ({ agents } = await ws.client.request('agents.list'));
    } catch (err) {
      toast(`Could not list agents${ws.id === LOCAL ? '' : ` on ${ws.name}`}: ${err.message}`);
      return;
    }
    ws.agents = new Map(agents.map((a) => [a.agent, a]));
    ws.agentList = agents;
    if (ws === this.active) this.fillAgents(ws);
    this.renderSessions();
  }

  /** The new-session form and the agents section for the active workstation. */
  fillAgents(ws) {
    this.list.fillAgents(ws);
    this.settings.renderAgents(ws);
    for (const view of this.views.values()) {
      if (view.ws !== ws) continue;
      view.renderHeader();
      view.renderCapabilities();
    }
  }

  notify(message, level = 'error') {
    toast(message, level);
  }

  // ---- session lists -------------------------------------------------------------------------

  async loadSessions(ws = this.active) {
    if (!ws) return;
    let sessions;
    try {
      ({ sessions } = await ws.client.request('sessions.list', { include_external: true }));
    } catch (err) {
      toast(`Could not list sessions${ws.id === LOCAL ? '' : ` on ${ws.name}`}: ${err.message}`);
      return;
    }
    ws.sessions = new Map(sessions.map((s) => [s.session, s]));
    for (const s of sessions) if (!s.queued) this.outbox.nothingQueued(ws.id, s.session);
    for (const view of this.views.values()) {
      if (view.ws !== ws) continue;
      const fresh = ws.sessions.get(view.id);
      if (fresh && view.session.fromOutbox) view.session = { ...fresh };
      if (fresh) view.setState({ title: fresh.title, writer: fresh.writer, queued: fresh.queued, model: fresh.model, mode: fresh.mode });
    }
    this.renderSessions();
  }

  // ---- which session is shown ----------------------------------------------------------------

  open(sessionId, ws = this.active) {
    this.show(sessionId, ws);
  }

  /** Show a session (or none) of workstation `ws`: `#session=ID`, plus `&ws=ID` if not local.
   *  Opening a session is a new history entry (the browser's back returns to the list). */
  show(sessionId, ws = this.active, push = Boolean(sessionId)) {
    const params = readFragment();
    if (sessionId) {
      params.set('session', sessionId);
      params.delete('view');
    } else params.delete('session');
    if (ws && ws.id !== LOCAL) params.set('ws', ws.id);
    else params.delete('ws');
    writeFragment(params, push);
    this.route();
  }

  route() {
    const params = readFragment();
    const wanted = params.has('ws') ? this.stations.get(params.get('ws')) : this.stations.get(LOCAL);
    if (params.has('ws') && !wanted) {
      if (this.restoring) return; // shown once the stored workstations are back
      toast('That workstation is not paired with this browser.');
      params.delete('ws');
      params.delete('session');
      writeFragment(params);
    }
    if (wanted && wanted !== this.active && (params.has('session') || params.has('ws'))) this.setActive(wanted);
    // back or forward to another view: its heading takes the focus, as a choice in the nav does
    if (this.layout() && !params.has('session')) this.nav.focusHeading();
    if (!this.client) return;
    const id = params.get('session');
    if (this.current && this.current.id !== id) {
      this.current.leave();
      this.current.el.remove();
      this.current = null;
    }
    if (id && !this.current) {
      let known = this.sessions.get(id);
      // opened again while its workstation is away, a session with messages in the outbox
      // shows them (waiting) from what the outbox knows; the list completes it once it is back
      if (!known && !this.client.isOpen && this.outbox.of(this.active.id, id).length) {
        known = { session: id, title: '', state: 'unknown', fromOutbox: true };
      }
      if (!known && !this.client.isOpen) {
        this.layout();
        return; // opened again from onOpen once the lists are in
      }
      if (!known) {
        toast('That session no longer exists.');
        this.show(null);
        return;
      }
      const key = `${this.active.id}\n${id}`;
      let view = this.views.get(key);
      if (!view) {
        view = new SessionView(this, known);
        this.views.set(key, view);
      }
      this.current = view;
      $('#pane').append(view.el);
      view.open();
      view.transcript.stick = true;
      view.transcript.flush();
      if (!phoneQuery.matches) view.textarea.focus();
      else view.titleEl.focus({ preventScroll: true }); // a screen reader starts at its title
    }
    if (this.current && params.has('seq')) {
      // a deep link to an event (`&seq=N`): scrolled to once, then the seq is dropped
      search.revealSeq(this.current, Number(params.get('seq')));
      params.delete('seq');
      writeFragment(params);
    }
    $('#pane-empty').hidden = Boolean(this.current);
    this.renderSessions();
    this.layout();
    this.attention.report();
    if (params.has('answer') && this.current?.id === id && this.client.isOpen) this.answerFromNotification(params);
  }

  /** A notification's Allow/Deny chosen where the worker cannot answer itself (a workstation
   *  reached through the relay): the page it opened answers at once, then forgets the answer. */
  async answerFromNotification(params) {
    const [requestId, optionId] = String(params.get('answer')).split(/:(.*)/s);
    params.delete('answer');
    writeFragment(params);
    try {
      await this.client.request('session.permission', { session: this.current.id, request_id: requestId, option_id: optionId });
      toast(`Answered: ${optionId}`, 'info');
    } catch (err) {
      // answered already (another device, or a second tap): the prompt shows how it ended
      if (err.code !== 'not_found') toast(`Could not answer: ${err.message}`);
    }
  }

  /** The view the fragment names shown; true when that is another view than before. */
  layout() {
    return this.nav.layout();
  }

  diffMode() {
    return localStorage.getItem(DIFF_KEY) || 'unified';
  }

  setDiffMode(mode) {
    localStorage.setItem(DIFF_KEY, mode);
    for (const view of this.views.values()) view.transcript.refreshDiffs();
  }
}

const app = new App();
window.agentBridge = {
  app,
  toast,
  get client() { return app.client; },
};
app.init();
