// The web client's UI: sign-in, agent and session lists, one open session at a time.
// The protocol lives in protocol.js and the rendering of blocks in transcript.js; this file
// wires them to the page. `window.agentBridge` exposes the live objects for the curious.
//
// Every workstation in one client (workstations.js): the page's own daemon (token) and any
// others (paired through a relay, or another daemon's token link) each have a client; the
// session list shows them all, grouped by workstation. One workstation is "active" at a
// time: the one whose session is open and on which the new-session form creates sessions;
// `app.client`, `app.agents` and `app.sessions` are the active workstation's.

import { $, clear, codeSpans, h, randomId, relativeTime } from './dom.js';
import { Attention } from './attention.js';
import { icon } from './icons.js';
import {
  LOCAL, Workstation, deviceName, directRecord, forgetRecord, loadRecords, saveRecord,
} from './workstations.js';
import { Transcript, commandBox, terminalCommand, usageText } from './transcript.js';
import { ChangesPanel, ProjectPicker, fillModes, followMode, modePicker, renderMode } from './workspace.js';
import { suggestBranch } from './ship.js';
import { PreviewPanel } from './preview.js';
import { Outbox } from './outbox.js';
import { SteerChoice, forkButton, forkSession } from './steer.js';
import * as search from './search.js';
import * as usage from './usage.js';

const TOKEN_KEY = 'agent-bridge.token';
const CWD_KEY = 'agent-bridge.cwd';
const NO_SESSIONS = new Map();
const DIFF_KEY = 'agent-bridge.diff';
const LIST_REFRESH_MS = 15_000;
/** Workstation states in which a message waits in the outbox rather than staying in the box. */
const WAITABLE = new Set(['offline', 'relay_down', 'connecting']);
const phoneQuery = window.matchMedia('(max-width: 760px)');
const touchQuery = window.matchMedia('(pointer: coarse)');

// ---- the token: typed in once, or taken from the pairing URL's #token=… ------------------------

function readFragment() {
  return new URLSearchParams(window.location.hash.slice(1));
}

function writeFragment(params) {
  const text = params.toString();
  const url = window.location.pathname + window.location.search + (text ? `#${text}` : '');
  window.history.replaceState(null, '', url);
}

function takeToken() {
  const params = readFragment();
  const fromUrl = params.get('token');
  if (fromUrl) {
    // Keep it, then drop it from the address bar and history so it is not shared by accident.
    saveToken(fromUrl, true);
    params.delete('token');
    writeFragment(params);
    return fromUrl;
  }
  return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
}

function saveToken(token, remember) {
  forgetToken();
  (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
}

function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
}

// ---- small UI helpers --------------------------------------------------------------------------

/** How long "Paired with …" stays under the pairing form. */
const PAIRED_NOTE_MS = 6000;

function toast(message, level = 'error') {
  let stack = $('#toasts');
  if (!stack) {
    stack = h('div', { id: 'toasts', class: 'toasts', role: 'alert' });
    document.body.append(stack);
  }
  const el = h('div', { class: `toast ${level}`, onclick: () => el.remove() }, codeSpans(message));
  stack.append(el);
  setTimeout(() => el.remove(), 6000);
}

/** "parked · a terminal owns it · 2 queued"; `short` leaves out who owns it (for lists). */
function stateLabel({ state, writer, queued, needs }, short = false) {
  // `needs` (docs/protocol.md): the session waits on a person, which says more than `running`.
  let text = needs ? 'needs you' : state || 'unknown';
  if (state === 'parked' && writer === 'terminal' && !short) text += ' · a terminal owns it';
  if (queued) text += ` · ${queued} queued`;
  return text;
}

function stateBadge(s) {
  return h('span', { class: 'badge state', dataset: { state: s.needs ? 'needs' : s.state } }, stateLabel(s, true));
}

/**
 * A session the daemon found in an agent's own terminal history but does not host yet: it has
 * no event log to subscribe to until `session.attach` adopts it. The daemon names these
 * `ext:<agent>:<agent_session_id>` (docs/protocol.md). An adopted one keeps `external: true`.
 */
function isFoundOnDisk(s) {
  return s.external && s.session.startsWith('ext:');
}

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] ?? '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// ---- one open session --------------------------------------------------------------------------

class SessionView {
  constructor(app, session) {
    this.app = app;
    this.ws = app.active;
    this.id = session.session;
    this.session = { ...session };
    this.info = null;
    this.files = [];
    /** client_msg_id -> its pending bubble (js/transcript.js addPending) */
    this.pendings = new Map();
    this.build();
    this.transcript = new Transcript(this.scroller, {
      onPermission: (requestId, optionId) => app.client.request('session.permission', {
        session: this.id, request_id: requestId, option_id: optionId,
      }),
      onUsage: (u) => this.setUsage(u),
      onUser: (id) => app.outbox.userSeen(id),
      onInfo: (info) => { this.info = info; this.renderCapabilities(); },
      onRetry: (text) => this.retry(text),
      onAllowSetup: (path, sha256) => app.client.request('workspace.allow_setup', { path, sha256 }),
      userActions: (b, frame) => (b.steer || this.capabilities().fork === false ? null
        : forkButton(() => this.fork(frame.seq))),
      diffMode: () => app.diffMode(),
      setDiffMode: (mode) => app.setDiffMode(mode),
    });
    this.renderHeader();
    this.renderCapabilities();
  }

  get agent() {
    return this.app.agents.get(this.session.agent);
  }

  build() {
    this.titleEl = h('div', { class: 'title' });
    this.metaEl = h('div', { class: 'meta muted small' });
    this.stateEl = h('span', { class: 'badge state' });
    this.usageEl = h('span', { class: 'usage muted small', title: 'Usage and cost of this session' });
    this.stopBtn = h('button', { type: 'button', class: 'danger', onclick: () => this.interrupt() },
      icon('stop'), ' Stop');
    this.handoffBtn = h('button', {
      type: 'button', title: 'Continue in terminal', onclick: () => this.handoff(),
    }, icon('terminal'), h('span', { class: 'hide-phone' }, ' Continue in terminal'),
    h('span', { class: 'phone-only' }, ' Terminal')); // a phone has no tooltip to name the icon
    this.forkBtn = h('button', {
      type: 'button', class: 'link-btn', title: 'Fork: a new session with this conversation',
      onclick: () => this.fork(),
    }, 'Fork');
    this.closeBtn = h('button', {
      type: 'button', class: 'link-btn', title: 'End session', onclick: () => this.closeSession(),
    }, 'End', h('span', { class: 'hide-phone' }, ' session'));
    this.handoffBox = h('div', { class: 'handoff-box', hidden: true });
    this.modeSelect = modePicker(this);
    this.changes = new ChangesPanel(this);
    this.preview = new PreviewPanel(this);
    this.changesBtn = h('button', {
      type: 'button', class: 'changes-btn', title: 'Changes in the working directory',
      onclick: () => this.toggleChanges(),
    }, 'Changes');
    this.scroller = h('div', { class: 'transcript' });
    this.textarea = h('textarea', {
      rows: 2, placeholder: 'Message  (/ for commands)', 'aria-label': 'Message',
      oninput: () => this.onInput(), onkeydown: (ev) => this.onKey(ev),
    });
    this.fileInput = h('input', {
      type: 'file', multiple: true, hidden: true, onchange: () => this.addFiles(this.fileInput.files),
    });
    this.attachBtn = h('button', {
      type: 'button', class: 'icon-btn', title: 'Attach files', 'aria-label': 'Attach files',
      onclick: () => this.fileInput.click(),
    }, icon('attach'));
    this.filesEl = h('div', { class: 'chips attachments' });
    this.hintsEl = h('div', { class: 'hints', hidden: true });
    this.sendBtn = h('button', { type: 'submit', class: 'primary send' }, 'Send');
    this.steer = new SteerChoice(() => { this.sendBtn.textContent = this.steer.label; });
    // Said where a phone shows it (no tooltips): why this session cannot be reached now.
    this.reachEl = h('p', { class: 'reach-note', role: 'status', hidden: true });
    this.form = h('form', { class: 'composer', onsubmit: (ev) => { ev.preventDefault(); this.send(); } },
      this.reachEl, this.hintsEl, this.filesEl, this.steer.el,
      h('div', { class: 'composer-row' }, this.attachBtn, this.fileInput, this.textarea, this.sendBtn));
    this.el = h('section', { class: 'session', dataset: { session: this.id } },
      h('div', { class: 'session-head' },
        h('div', { class: 'head-main' }, this.titleEl, this.metaEl),
        h('div', { class: 'head-side' }, this.stateEl, this.usageEl),
        h('div', { class: 'head-actions' }, this.modeSelect, this.changesBtn, this.preview.button, this.stopBtn,
          this.handoffBtn, this.forkBtn, this.closeBtn)),
      this.handoffBox, this.changes.el, this.scroller, this.form);
  }

  renderHeader() {
    const s = this.session;
    this.titleEl.textContent = s.title || 'New session';
    const agent = this.agent;
    const station = this.app.stations.size > 1 || this.ws?.kind === 'relay' ? this.ws?.name : '';
    this.metaEl.textContent = [station, agent?.display_name || s.agent, s.model,
      s.worktree ? `⎇ ${s.worktree.branch}` : '', s.cwd]
      .filter(Boolean).join(' · ');
    this.stateEl.dataset.state = s.state;
    this.stateEl.textContent = stateLabel(s);
    this.stateEl.title = this.stateEl.textContent;
    const away = this.renderReach();
    this.stopBtn.disabled = s.state !== 'running' || away;
    const handoff = agent?.handoff ?? 'none';
    this.handoffBtn.hidden = handoff === 'none';
    this.handoffBtn.disabled = !['idle', 'running'].includes(s.state) || away;
    this.closeBtn.hidden = s.state === 'ended';
    this.closeBtn.disabled = away;
    // unreachable for now: what is sent waits in the outbox; refused for good: kept in the box
    this.sendBtn.disabled = away && !WAITABLE.has(this.ws?.state);
    this.form.classList.toggle('disabled', s.state === 'ended');
    this.renderSteer();
    renderMode(this);
  }

  capabilities() {
    return this.info?.capabilities || this.agent?.capabilities || {};
  }

  /** The Steer / Queue choice while a turn runs, and Fork where the agent's sessions fork. */
  renderSteer() {
    const caps = this.capabilities();
    this.steer.update(this.session.state === 'running', Boolean(caps.input_during_turn));
    this.sendBtn.textContent = this.steer.label;
    this.forkBtn.hidden = caps.fork === false || this.session.state === 'unknown';
  }

  fork(atSeq) {
    return forkSession(this, atSeq, (err) => toast(`Could not fork: ${err.message}`));
  }

  /** Says why the session's workstation cannot be reached (revoked, relay down, offline);
   *  true while it cannot. */
  renderReach() {
    const said = this.ws?.reachNote || '';
    this.reachEl.hidden = !said;
    clear(this.reachEl).append(...codeSpans(said));
    this.reachEl.dataset.state = this.ws?.state ?? 'online';
    return Boolean(said);
  }

  toggleChanges(show = this.changes.el.hidden) {
    this.changes.el.hidden = !show;
    this.el.dataset.panel = show ? 'changes' : '';
    this.changesBtn.classList.toggle('active', show);
    if (show) this.changes.open();
  }

  renderCapabilities() {
    const caps = this.capabilities();
    this.renderSteer();
    this.attachBtn.hidden = !caps.images && !caps.documents;
    this.fileInput.accept = caps.images && !caps.documents ? 'image/*' : '';
  }

  setState(st) {
    for (const key of ['state', 'writer', 'queued', 'title', 'model', 'mode']) {
      if (st[key] !== undefined && st[key] !== null) this.session[key] = st[key];
    }
    if (st.state === 'ended') this.session.queued = 0;
    if (!this.session.queued) this.app.outbox.nothingQueued(this.ws.id, this.id);
    this.renderHeader();
    this.app.updateListItem(this.session, this.ws);
  }

  /** "needs you" as it happens: the header and the list say so while a permission request is
   *  open in the transcript, not only once the next `sessions.list` says `needs`. */
  followNeeds() {
    const open = [...this.transcript.permissions.values()].some((p) => p.state === 'open');
    const needs = open ? 'permission' : null;
    if ((this.session.needs ?? null) === needs) return;
    this.session.needs = needs;
    this.renderHeader();
    this.app.updateListItem(this.session, this.ws);
  }

  setUsage(u) {
    this.usageEl.textContent = usageText(u);
  }

  open() {
    this.showWaiting();
    this.app.client.subscribe(this.id, {
      onEvent: (frame) => { this.transcript.apply(frame); followMode(this, frame); this.followNeeds(); },
      onState: (st) => this.setState(st),
      onError: (err) => toast(`Could not follow this session: ${err.message}`),
    }, this.transcript.lastSeq);
    if (!this.usageEl.textContent) {
      this.app.client.request('usage.get', { session: this.id })
        .then((r) => { if (r.usage && !this.usageEl.textContent) this.setUsage(r.usage); })
        .catch(() => {});
    }
  }

  leave() {
    this.app.client.unsubscribe(this.id);
  }

  // ---- composing -----------------------------------------------------------------------------

  onKey(ev) {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && !touchQuery.matches) {
      ev.preventDefault();
      this.send();
    }
  }

  onInput() {
    const text = this.textarea.value;
    const commands = this.info?.commands || [];
    clear(this.hintsEl);
    const match = /^\/\S*$/.test(text) ? commands.filter((c) => c.name.startsWith(text)) : [];
    this.hintsEl.hidden = !match.length;
    for (const c of match.slice(0, 8)) {
      this.hintsEl.append(h('button', {
        type: 'button',
        class: 'hint',
        onclick: () => { this.textarea.value = `${c.name} `; this.onInput(); this.textarea.focus(); },
      }, h('b', {}, c.name), ' ', h('span', { class: 'muted' }, c.description || '')));
    }
  }

  addFiles(list) {
    const caps = this.info?.capabilities || this.agent?.capabilities || {};
    for (const file of list) {
      const isImage = file.type.startsWith('image/');
      if (isImage ? !caps.images : !caps.documents) {
        toast(`${file.name}: this agent does not accept ${isImage ? 'images' : 'documents'}`);
        continue;
      }
      this.files.push(file);
    }
    this.fileInput.value = '';
    this.renderFiles();
  }

  renderFiles() {
    for (const url of this.previewUrls || []) URL.revokeObjectURL(url);
    this.previewUrls = [];
    clear(this.filesEl);
    this.files.forEach((file, idx) => {
      let preview = null;
      if (file.type.startsWith('image/')) {
        const url = URL.createObjectURL(file); // a blob: URL, allowed by the CSP's img-src
        this.previewUrls.push(url);
        preview = h('img', { src: url, alt: '', class: 'thumb' });
      }
      this.filesEl.append(h('span', { class: 'chip' }, preview, file.name, h('button', {
        type: 'button', class: 'chip-x', 'aria-label': `Remove ${file.name}`,
        onclick: () => { this.files.splice(idx, 1); this.renderFiles(); },
      }, '×')));
    });
  }

  async send() {
    const text = this.textarea.value;
    if (!text.trim() && !this.files.length) return;
    // refused for good (revoked, a rejected token): kept in the box; unreachable: the outbox
    if (this.renderReach() && !WAITABLE.has(this.ws?.state)) return;
    const files = this.files;
    const id = randomId();
    let attachments;
    try {
      attachments = await Promise.all(files.map(async (f) => ({
        name: f.name, mime: f.type || 'application/octet-stream', data: await readBase64(f),
      })));
    } catch (err) {
      toast(`Could not read the attachment: ${err}`);
      return;
    }
    this.textarea.value = '';
    this.files = [];
    this.renderFiles();
    this.onInput();
    const entry = { id, ws: this.ws.id, session: this.id, text, attachments, created: Date.now() };
    if (this.steer.steering) entry.steer = true; // into the running turn (js/steer.js)
    await this.app.outbox.put(entry); // first: a page closed from here on loses nothing
    const pending = this.transcript.addPending(id, text, attachments);
    this.pendings.set(id, pending);
    if (!this.ws.client.isOpen) {
      pending.waiting(this.ws.name, () => this.cancelWaiting(id));
      this.app.relayOutbox(this.ws);
      return;
    }
    // after what still waits for this workstation, in order
    await this.app.flushOutbox(this.ws);
  }

  sentHooks(pending, text) {
    return {
      onDone: (result) => {
        pending.queued(result.queued, result.steered);
        if (!this.session.title) this.app.loadSessions(); // the daemon titles it from this message
      },
      onFailed: (message) => {
        pending.failed(message);
        if (!this.textarea.value) this.textarea.value = text;
      },
      onRelayed: () => pending.relayed(this.ws.name),
    };
  }

  /** The messages of this session still in the outbox (typed before the page was closed), and
   *  those the daemon holds queued: not in the log until their turn starts. */
  showWaiting() {
    for (const e of this.app.outbox.of(this.ws.id, this.id)) {
      if (this.pendings.has(e.id) || this.transcript.userIds.has(e.id)) continue;
      const pending = this.transcript.addPending(e.id, e.text, e.attachments || []);
      this.pendings.set(e.id, pending);
      if (e.queued) pending.queued(true);
      else if (e.relayed) pending.relayed(this.ws.name);
      else if (!this.ws.client.isOpen) pending.waiting(this.ws.name, () => this.cancelWaiting(e.id));
    }
  }

  async cancelWaiting(id) {
    if (this.app.outbox.sending.has(id)) return; // on its way already
    if (this.app.outbox.entries.get(id)?.relayed) return; // on the relay: it cannot be taken back
    await this.app.outbox.drop(id);
    this.pendings.get(id)?.remove();
    this.pendings.delete(id);
  }

  /** Send `text` again after a failure the bridge did not retry (the error's Retry button). */
  async retry(text) {
    const id = randomId();
    const pending = this.transcript.addPending(id, text, []);
    try {
      const result = await this.app.client.request('session.send', {
        session: this.id, text, client_msg_id: id,
      });
      pending.queued(result.queued);
    } catch (err) {
      pending.failed(err.message);
      throw err;
    }
  }

  async interrupt() {
    try {
      await this.app.client.request('session.interrupt', { session: this.id });
    } catch (err) {
      toast(`Could not stop the turn: ${err.message}`);
    }
  }

  async handoff() {
    try {
      const result = await this.app.client.request('session.handoff', { session: this.id });
      clear(this.handoffBox).append(
        commandBox(terminalCommand(result), 'Continue in a terminal: run this on the daemon\'s machine'),
        h('button', { type: 'button', class: 'link-btn', onclick: () => { this.handoffBox.hidden = true; } }, 'Dismiss'));
      this.handoffBox.hidden = false;
    } catch (err) {
      toast(`Could not hand off: ${err.message}`);
    }
  }

  async closeSession() {
    if (!window.confirm('End this session? The agent stops; the history stays.')) return;
    try {
      await this.app.client.request('session.close', { session: this.id });
    } catch (err) {
      toast(`Could not end the session: ${err.message}`);
    }
  }
}

// ---- the application ---------------------------------------------------------------------------

class App {
  constructor() {
    this.stations = new Map(); // id -> Workstation, in the order they are listed
    this.active = null;
    this.relay = null; // relay.js, loaded when the first relay workstation appears
    this.views = new Map();
    this.outbox = new Outbox();
    this.outbox.addEventListener('change', () => this.renderSessions());
    this.current = null;
    this.refreshTimer = null;
    this.countdown = null;
    this.attention = new Attention(this);
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
    search.mount(this, $('#search-mount'));
    usage.mount(this, $('#usage-mount'));
    $('#login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('#token').value.trim();
      if (!token) return;
      saveToken(token, $('#remember').checked);
      $('#token').value = '';
      this.connect(token);
    });
    $('#logout').addEventListener('click', () => this.signOut());
    $('#back').addEventListener('click', () => this.show(null));
    $('#conn').addEventListener('click', () => this.client?.nudge());
    $('#new-session').addEventListener('submit', (ev) => { ev.preventDefault(); this.createSession(); });
    $('#ns-worktree').addEventListener('change', () => {
      const on = $('#ns-worktree').checked;
      $('#ns-branch-row').hidden = !on;
      if (on && !$('#ns-branch').value) $('#ns-branch').placeholder = suggestBranch($('#ns-cwd').value.trim());
    });
    $('#ns-toggle').addEventListener('click', () => {
      this.formChosen = true;
      this.collapseForm(!$('#new-session').hasAttribute('data-collapsed'));
    });
    $('#ns-agent').addEventListener('change', () => { this.loadModels(); this.loadModes(); });
    $('#ns-ws').addEventListener('change', () => {
      const ws = this.stations.get($('#ns-ws').value);
      if (ws && ws !== this.active) this.show(null, ws);
    });
    for (const form of ['#ws-add', '#login-link']) {
      $(form).addEventListener('submit', (ev) => {
        ev.preventDefault();
        const input = $(form).querySelector('input');
        const text = input.value.trim();
        input.value = '';
        if (text) this.addFromLink(text);
      });
    }
    this.projects = new ProjectPicker(this, $('#ns-cwd'), $('#ns-projects'));
    $('#ns-cwd').value = localStorage.getItem(CWD_KEY) || '';
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
    phoneQuery.addEventListener('change', () => this.layout());
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
      if (!this.stations.size) this.showLogin();
      return undefined;
    });
  }

  // ---- workstations --------------------------------------------------------------------------

  async relayModule() {
    if (!this.relay) this.relay = await import('./relay.js');
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
    $('#login').hidden = true;
    $('#main').hidden = false;
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
    if (!this.stations.size) this.showLogin();
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
    $('#ns-cwd').value = localStorage.getItem(this.cwdKey(ws)) || '';
    this.fillAgents(ws);
    if (ws.client.isOpen) {
      this.projects.load();
      this.fillCwd();
    }
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
    const status = $('#pair-status');
    const say = (text, error = false, fadeMs = 0) => {
      const shown = [status, $('#login-pair-status')];
      for (const el of shown) {
        el.hidden = false;
        el.className = error ? 'error-text small' : 'muted small';
        clear(el).append(...codeSpans(text));
      }
      clearTimeout(this.pairNoteTimer);
      // a success is said, then gets out of the way; an error stays until the next try
      if (fadeMs) this.pairNoteTimer = setTimeout(() => { for (const el of shown) el.hidden = true; }, fadeMs);
      // said once: a toast too only where neither note is on screen (a phone in a session)
      if (error && !shown.some((el) => el.getClientRects().length)) toast(text);
    };
    let relay;
    let link;
    try {
      relay = await this.relayModule();
      link = relay.parseLink(value);
    } catch (err) {
      if (!this.stations.size) this.showLogin();
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
      say(`Paired with ${record.name}.`, false, PAIRED_NOTE_MS);
      toast(`Paired with ${record.name}.`, 'info');
    } catch (err) {
      const known = this.stations.get(`relay:${link.host}`);
      if (err.code === 'unknown_secret' && known?.record?.pk === link.pk) {
        // the link this browser paired with, opened again: nothing is wrong
        say(`This browser is already paired with ${known.name}.`, false, PAIRED_NOTE_MS);
        this.show(null, known);
        return;
      }
      const why = err.code === 'unknown_secret'
        ? 'the pairing link was already used or has expired: run `agent-bridge pair --relay` again'
        : err.message;
      if (!this.stations.size) this.showLogin();
      say(`Could not pair with ${link.name}: ${why}`, true);
    }
  }

  /** On a phone the form folds to its heading while there are sessions to list (CSS shows
   *  it whole on a wide screen either way). */
  collapseForm(collapsed) {
    const form = $('#new-session');
    form.toggleAttribute('data-collapsed', collapsed);
    $('#ns-toggle').setAttribute('aria-expanded', String(!collapsed));
  }

  /** The form unfolded (a phone's "+ New session"). */
  showNewSession() {
    this.formChosen = true;
    this.collapseForm(false);
  }

  /** The workstations section, the groups' states and the new-session form's choice. */
  renderStations() {
    const list = clear($('#stations'));
    for (const ws of this.stations.values()) {
      list.append(h('li', { class: 'station', dataset: { ws: ws.id, state: ws.state } },
        h('span', { class: 'dot', 'aria-hidden': 'true' }),
        h('span', { class: 'station-name' }, ws.name),
        h('span', { class: 'muted small' }, ws.kind === 'relay' ? `relay · ${ws.record.host}` : 'direct'),
        h('span', { class: 'badge ws-state', dataset: { state: ws.state } }, ws.stateLabel),
        h('button', {
          type: 'button', class: 'link-btn small', title: `Remove ${ws.name} from this browser`,
          onclick: () => {
            if (!window.confirm(`Remove ${ws.name} from this browser?`)) return;
            if (ws.id === LOCAL) this.signOut();
            else this.removeStation(ws);
          },
        }, 'Remove')));
    }
    const select = clear($('#ns-ws'));
    for (const ws of this.stations.values()) select.append(h('option', { value: ws.id }, ws.name));
    if (this.active) select.value = this.active.id;
    $('#ns-ws-row').hidden = this.stations.size < 2;
    // no session starts where this browser is refused: why, instead of an empty form
    const refused = this.active?.refusesBrowser ? this.active.reachNote : '';
    $('#new-session').toggleAttribute('data-refused', Boolean(refused));
    clear($('#ns-refused')).append(...codeSpans(refused));
    $('#new-session button[type=submit]').disabled = Boolean(refused);
    this.renderSessions();
  }


  showLogin(error) {
    $('#main').hidden = true;
    $('#logout').hidden = true;
    $('#login').hidden = false;
    $('#login-error').hidden = !error;
    clear($('#login-error')).append(...codeSpans(error || ''));
    $('#token').focus();
    // Served by `relay serve`: there is no daemon here to sign in to, only relay pairing.
    this.servedByRelay().then((relay) => {
      if (!relay) return;
      $('#login-form').hidden = true;
      $('#login-link h2').textContent = 'Pair through a relay';
      $('#login-link-input').focus();
    });
  }

  /** Whether `agent-bridge relay serve` served this page (its /healthz says `relay: true`;
   *  a daemon's says its relay link's state), asked once, only when the sign-in page shows. */
  async servedByRelay() {
    if (this.relayOrigin === undefined) {
      try {
        const res = await fetch('/healthz', { cache: 'no-store' });
        this.relayOrigin = res.ok && (await res.json()).relay === true;
      } catch {
        this.relayOrigin = false;
      }
    }
    return this.relayOrigin;
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
    this.showLogin();
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
      this.showLogin('The daemon rejected this token. Check it with `agent-bridge token`.');
    }
  }

  async onOpen() {
    await Promise.all([this.loadAgents(), this.loadSessions(), this.projects.load()]);
    this.fillCwd();
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
    const agents = ws.agentList || [];
    $('#agents-title').textContent = this.stations.size > 1 ? `Agents on ${ws.name}` : 'Agents';
    const select = $('#ns-agent');
    const previous = select.value;
    clear(select);
    for (const a of agents) {
      const label = a.available ? a.display_name : `${a.display_name} (not available)`;
      select.append(h('option', { value: a.agent, disabled: !a.available }, label));
    }
    const firstAvailable = agents.find((a) => a.available)?.agent;
    select.value = this.agents.get(previous)?.available ? previous : (firstAvailable || '');
    this.renderAgents(agents);
    this.loadModels();
    this.loadModes();
    for (const view of this.views.values()) {
      if (view.ws !== ws) continue;
      view.renderHeader();
      view.renderCapabilities();
    }
  }

  renderAgents(agents) {
    const list = clear($('#agents'));
    const row = (a) => {
      const caps = Object.entries(a.capabilities || {}).filter(([, on]) => on).map(([c]) => c);
      const result = h('div', { class: 'check-result small' });
      const check = h('button', {
        type: 'button', class: 'small-btn',
        onclick: async () => {
          result.textContent = 'Checking…';
          try {
            const r = await this.client.request('agents.check', { agent: a.agent });
            clear(result).append(h('b', { class: `check-${r.status}` }, r.status),
              ...r.checks.map((c) => h('div', { class: `check-${c.level}` },
                codeSpans(`${c.message}${c.hint ? ` (${c.hint})` : ''}`))));
          } catch (err) {
            clear(result).append(...codeSpans(err.message));
          }
        },
      }, 'Check');
      return h('li', { class: `agent ${a.available ? 'available' : 'unavailable'}`, dataset: { agent: a.agent } },
        h('div', { class: 'agent-row' },
          h('span', { class: 'dot', 'aria-hidden': 'true' }),
          h('span', { class: 'agent-name' }, a.display_name),
          h('span', { class: 'muted small' }, a.version || ''),
          check),
        a.available
          ? (caps.length ? h('div', { class: 'caps' }, caps.map((c) => h('span', { class: 'tag' }, c))) : null)
          : h('div', { class: 'reason small' }, codeSpans(a.error || 'not found on this machine')),
        result);
    };
    const available = agents.filter((a) => a.available);
    const missing = agents.filter((a) => !a.available);
    list.append(...available.map(row));
    if (missing.length) {
      list.append(h('li', {}, h('details', { class: 'unavailable-agents' },
        h('summary', {}, `Not available here (${missing.length})`),
        h('ul', { class: 'agent-list' }, missing.map(row)))));
    }
  }

  async loadModels() {
    const agent = this.agents.get($('#ns-agent').value);
    const select = $('#ns-model');
    clear(select).append(h('option', { value: '' }, 'Agent default'));
    $('#ns-model-row').hidden = !agent?.provides_models;
    if (!agent?.provides_models) return;
    try {
      const { models } = await this.client.request('models.list', { agent: agent.agent });
      if ($('#ns-agent').value !== agent.agent) return;
      for (const m of models) select.append(h('option', { value: m.id }, m.label || m.id));
    } catch (err) {
      select.append(h('option', { value: '', disabled: true }, `models unavailable: ${err.message}`));
    }
  }

  loadModes() {
    const agent = this.agents.get($('#ns-agent').value);
    $('#ns-mode-row').hidden = !fillModes($('#ns-mode'), agent, $('#ns-mode').value, true);
  }

  notify(message, level = 'error') {
    toast(message, level);
  }

  /**
   * A value for an empty working-directory field: the last used directory, else the newest
   * session's, else the daemon's home. The projects list under the field offers the others.
   */
  fillCwd() {
    const input = $('#ns-cwd');
    // not into a field the person is typing in: a list that loads late would put a default
    // before what they type (an empty field mid-edit is not an empty field)
    if (input.value || document.activeElement === input) return;
    const newest = [...this.sessions.values()]
      .filter((s) => s.cwd)
      .sort((a, b) => String(b.updated_at || '').localeCompare(String(a.updated_at || '')))[0];
    input.value = localStorage.getItem(this.cwdKey()) || newest?.cwd || this.client?.server?.home || '';
    this.projects.render();
  }

  async createSession() {
    const agent = $('#ns-agent').value;
    const cwd = $('#ns-cwd').value.trim();
    const model = $('#ns-model').value || undefined;
    const mode = $('#ns-mode').value || undefined;
    const worktree = $('#ns-worktree').checked
      ? { branch: $('#ns-branch').value.trim() || suggestBranch(cwd) } : undefined;
    const errorEl = $('#ns-error');
    errorEl.hidden = true;
    const button = $('#new-session button[type=submit]');
    button.disabled = true;
    try {
      const { session } = await this.client.request('session.create', { agent, cwd, model, mode, worktree });
      localStorage.setItem(this.cwdKey(), cwd);
      $('#ns-worktree').checked = false;
      $('#ns-branch-row').hidden = true;
      $('#ns-branch').value = '';
      this.projects.load();
      this.sessions.set(session.session, session);
      this.formChosen = false; // back on the list, the form folds again
      this.renderSessions();
      this.open(session.session);
    } catch (err) {
      clear(errorEl).append(...codeSpans(err.hint ? `${err.message}: ${err.hint}` : err.message));
      errorEl.hidden = false;
    } finally {
      button.disabled = false;
    }
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

  /** One list, grouped by workstation; each group's head says the workstation's state. */
  renderSessions() {
    const groups = [];
    const externalGroups = [];
    let ownCount = 0;
    let externalCount = 0;
    for (const ws of this.stations.values()) {
      // the sessions that need a person first, then the most recently changed
      const all = [...ws.sessions.values()].sort((a, b) => (!!b.needs - !!a.needs)
        || b.updated_at.localeCompare(a.updated_at));
      const own = all.filter((s) => !isFoundOnDisk(s));
      const external = all.filter(isFoundOnDisk);
      ownCount += own.length;
      externalCount += external.length;
      const item = (s) => h('li', { dataset: { session: s.session } }, h('button', {
        type: 'button',
        class: `session-item${this.current?.id === s.session && this.current?.ws === ws ? ' active' : ''}`,
        onclick: () => (isFoundOnDisk(s) ? this.attach(s, ws) : this.open(s.session, ws)),
      },
      h('span', { class: 'item-title' }, s.title || (s.external ? 'Terminal session' : 'New session')),
      h('span', { class: 'item-meta muted small' },
        [ws.agents.get(s.agent)?.display_name || s.agent, s.cwd.split('/').filter(Boolean).pop() || s.cwd,
          relativeTime(s.updated_at)].filter(Boolean).join(' · ')),
      isFoundOnDisk(s)
        ? h('span', { class: 'badge state', dataset: { state: s.state } }, s.state === 'parked' ? 'open in a terminal' : 'attach')
        : stateBadge(s)));
      const waiting = this.outbox.unsent(ws.id).length;
      const head = () => h('div', { class: 'ws-head' },
        h('span', { class: 'dot', 'aria-hidden': 'true' }),
        h('span', { class: 'ws-name' }, ws.name),
        waiting ? h('span', { class: 'ws-waiting small' }, `${waiting} waiting to send`) : null,
        h('span', { class: 'ws-state small', dataset: { state: ws.state } }, ws.stateLabel));
      // a refusal is fixed on the workstation, not by waiting: say how right here
      const fix = ws.state === 'refused' ? `refused: add \`${location.origin}\` to \`server.allowed_origins\` on ${ws.name}`
        : ws.refusesBrowser ? ws.reachNote : '';
      const note = () => (fix ? h('p', { class: 'ws-note small' }, ...codeSpans(fix)) : null);
      const group = (items) => h('li', { class: 'ws-group', dataset: { ws: ws.id, state: ws.state } },
        head(), note(), h('ul', { class: 'session-list' }, items));
      groups.push(group(own.map(item)));
      if (external.length) externalGroups.push(group(external.map(item)));
    }
    clear($('#sessions')).append(...groups);
    clear($('#external')).append(...externalGroups);
    // "No sessions yet" only where a workstation said so: not for one that cannot be asked
    $('#sessions-empty').hidden = ownCount > 0 || ![...this.stations.values()].some((ws) => ws.state === 'online');
    if (!this.formChosen) this.collapseForm(ownCount > 0);
    $('#external-empty').hidden = externalCount > 0;
    const needing = [...this.stations.values()]
      .reduce((n, ws) => n + [...ws.sessions.values()].filter((s) => s.needs).length, 0);
    if (navigator.setAppBadge) {
      (needing ? navigator.setAppBadge(needing) : navigator.clearAppBadge()).catch(() => {});
    }
  }

  updateListItem(session, ws = this.active) {
    const known = ws?.sessions.get(session.session);
    if (!known) return;
    Object.assign(known, session);
    const group = `#sessions li.ws-group[data-ws="${CSS.escape(ws.id)}"]`;
    const li = $(`${group} li[data-session="${CSS.escape(session.session)}"]`);
    const old = li?.querySelector('.badge.state');
    if (old) old.replaceWith(stateBadge(known));
  }

  async attach(s, ws = this.active) {
    if (ws !== this.active) this.show(null, ws);
    try {
      const { session } = await this.client.request('session.attach', {
        agent: s.agent, agent_session_id: s.agent_session_id, cwd: s.cwd,
      });
      this.sessions.delete(s.session);
      this.sessions.set(session.session, session);
      this.open(session.session);
      await this.loadSessions(); // the daemon now lists it as ours, not under "In terminals"
    } catch (err) {
      toast(`Could not attach: ${err.message}`);
    }
  }

  // ---- which session is shown ----------------------------------------------------------------

  open(sessionId, ws = this.active) {
    this.show(sessionId, ws);
  }

  /** Show a session (or none) of workstation `ws`: `#session=ID`, plus `&ws=ID` if not local. */
  show(sessionId, ws = this.active) {
    const params = readFragment();
    if (sessionId) params.set('session', sessionId);
    else params.delete('session');
    if (ws && ws.id !== LOCAL) params.set('ws', ws.id);
    else params.delete('ws');
    writeFragment(params);
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
    }
    if (this.current && params.has('seq')) {
      // a search hit or a deep link: scrolled to once, the link's seq is then dropped
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

  layout() {
    const inSession = Boolean(readFragment().get('session'));
    document.body.dataset.view = inSession ? 'session' : 'list';
    $('#back').hidden = !(inSession && phoneQuery.matches);
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
