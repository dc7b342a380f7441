// One open session: its header, the transcript (ui/transcript.js), the Changes panel
// (views/workspace.js) and the composer. What is sent goes through the outbox
// (net/outbox.js), so nothing typed is lost while its workstation is away.

import { clear, codeSpans, h, randomId } from '../ui/dom.js';
import { icon } from '../ui/icons.js';
import { stateLabel } from '../ui/session-state.js';
import { toast } from '../ui/toast.js';
import { Transcript, commandBox, terminalCommand, usageText } from '../ui/transcript.js';
import { ChangesPanel, followMode, modePicker, renderMode } from './workspace.js';
import { PreviewPanel } from './preview.js';
import { SteerChoice, forkButton, forkSession } from './steer.js';

/** Workstation states in which a message waits in the outbox rather than staying in the box. */
const WAITABLE = new Set(['offline', 'relay_down', 'connecting']);
const touchQuery = window.matchMedia('(pointer: coarse)');

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] ?? '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// ---- one open session --------------------------------------------------------------------------

export class SessionView {
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
    this.titleEl = h('h2', { class: 'title', tabindex: '-1' });
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
    this.el = h('section', { class: 'session', 'aria-label': 'Session', dataset: { session: this.id } },
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
    this.forkBtn.disabled = away; // a fork is made by the daemon, which cannot be reached
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
    if (this.steer.steering) entry.steer = true; // into the running turn (views/steer.js)
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
