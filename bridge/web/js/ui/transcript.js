// One session's event log rendered as a transcript: apply(frame) for each event, in seq order.
//
// How the blocks of protocol v1 fold into what a person reads:
// - text / thinking: deltas append to the message with the same `id`; `done` closes it.
// - tool_call: the first one with an `id` makes a card; later ones with that id update it
//   (status running -> done | error). tool_result and diff land in the card of their
//   tool_call_id. A tool_call with a `parent_id` (sub-agent) nests in its parent's card.
// - permission_request: a card with the options as buttons. The log does not record answers,
//   so a prompt counts as settled once its tool call gets a result or finishes, or the turn
//   ends; until then any client may answer it.
// - plan: replaces the previous plan; older plan cards are dimmed.
// - usage, system, error, agent_info, session_end: one line or card each.
// Unknown block types are skipped (the server may add them within protocol v1).

import { clear, codeSpans, copyText, formatCost, formatCount, h, shellQuote } from './dom.js';
import { diffStats, hunksOf, renderSplit, renderUnified } from './diff.js';
import { hasIcon, icon } from './icons.js';
import { MarkdownStream, renderInline } from './markdown.js';

const kindIcon = (kind) => icon(hasIcon(kind) && kind !== 'back' ? kind : 'tool');
const SUMMARY_KEYS = ['command', 'file_path', 'path', 'pattern', 'query', 'url', 'description'];
const PLAN_ICON = { pending: '○', in_progress: '◐', completed: '●' };
const END_TEXT = {
  completed: 'Turn finished',
  interrupted: 'Interrupted',
  error: 'Turn ended with an error',
  timeout: 'Turn timed out',
  handoff: 'Handed off to a terminal',
};
const RESULT_OPEN_LINES = 12;

export function usageText(u) {
  const parts = [];
  if (u.input_tokens != null || u.output_tokens != null) {
    parts.push(`${formatCount(u.input_tokens ?? 0)} in · ${formatCount(u.output_tokens ?? 0)} out`);
  }
  if (u.cached_input_tokens) parts.push(`${formatCount(u.cached_input_tokens)} cached`);
  if (u.cost_usd != null) parts.push(formatCost(u.cost_usd));
  if (u.context_used != null && u.context_size) {
    const pct = (100 * u.context_used) / u.context_size;
    parts.push(`context ${pct < 1 ? pct.toFixed(1) : Math.round(pct)}%`);
  } else if (u.context_used != null) {
    parts.push(`context ${formatCount(u.context_used)}`);
  }
  return parts.join(' · ');
}

export function commandBox(command, label = 'Continue in a terminal') {
  const code = h('code', {}, command);
  const status = h('span', { class: 'muted small', role: 'status' });
  const copy = h('button', {
    type: 'button',
    class: 'small-btn',
    onclick: async () => {
      status.textContent = (await copyText(command, code)) ? 'Copied' : 'Selected: copy it';
    },
  }, 'Copy');
  return h('div', { class: 'command-box' },
    h('div', { class: 'command-label' }, label, ' ', status),
    h('pre', {}, code), copy);
}

export function terminalCommand({ command, cwd }) {
  return cwd ? `cd ${shellQuote(cwd)} && ${command}` : command;
}

export class Transcript {
  /**
   * @param {HTMLElement} scroller  the element that scrolls (kept pinned to the bottom)
   * @param {{onPermission: (id: string, option: string) => Promise<void>,
   *          onUsage?: (u: object) => void, onInfo?: (b: object) => void,
   *          onUser?: (id: string) => void,
   *          onRetry?: (text: string) => Promise<void>,
   *          onAllowSetup?: (path: string, sha256: string) => Promise<void>,
   *          diffMode?: () => 'unified'|'split', setDiffMode?: (m: string) => void}} hooks
   */
  constructor(scroller, hooks) {
    this.scroller = scroller;
    this.hooks = hooks;
    this.log = h('div', { class: 'log', role: 'log', 'aria-live': 'polite' });
    this.pendingEl = h('div', { class: 'pending' });
    // Whether the reader is at the bottom, told by an observer rather than read from the
    // layout: reading scrollHeight after a delta forced a layout of everything new at once.
    this.atBottom = true;
    const end = h('div', { class: 'transcript-end', 'aria-hidden': 'true' });
    scroller.append(this.log, this.pendingEl, end);
    if (typeof IntersectionObserver === 'function') {
      new IntersectionObserver(([seen]) => { this.atBottom = seen.isIntersecting; },
        { root: scroller, rootMargin: '0px 0px 80px 0px' }).observe(end);
    }
    /** Every seq applied, in order: what the tests (and a curious developer) check. */
    this.seqs = [];
    this.lastSeq = 0;
    this.messages = new Map();
    this.tools = new Map();
    this.permissions = new Map();
    this.lastPlan = null;
    this.pending = new Map();
    /** The ids of the user blocks in the log (a message sent from here shows once). */
    this.userIds = new Set();
    this.dirty = new Set();
    this.frame = 0;
    this.stick = true;
    this.diffViews = new Set();
    /** The text of the last user message, for the Retry button of a failed turn. */
    this.lastUserText = null;
    this.retryBtn = null;
  }

  // ---- applying events ---------------------------------------------------------------------

  apply(frame) {
    const b = frame.block;
    this.seqs.push(frame.seq);
    this.lastSeq = frame.seq;
    this.stick = this.stick || this.atBottom;
    switch (b.type) {
      case 'agent_info': this.#agentInfo(b, frame); break;
      case 'user': this.#user(b, frame); break;
      case 'text':
      case 'thinking': this.#delta(b, frame); break;
      case 'tool_call': this.#toolCall(b, frame); break;
      case 'tool_result': this.#toolResult(b, frame); break;
      case 'diff': this.#diff(b, frame); break;
      case 'plan': this.#plan(b, frame); break;
      case 'permission_request': this.#permission(b, frame); break;
      case 'usage': this.#usage(b, frame); break;
      case 'system': this.#system(b, frame); break;
      case 'error': this.#error(b, frame); break;
      case 'session_end': this.#end(b, frame); break;
      default: break;
    }
    this.#schedule();
  }

  #add(node, frame, parentId = null) {
    node.dataset.seq = String(frame.seq);
    if (frame.ts) node.dataset.ts = frame.ts;
    const parent = parentId && this.tools.get(parentId);
    (parent ? parent.children : this.log).append(node);
    return node;
  }

  #agentInfo(b, frame) {
    const version = b.version && /^\d/.test(b.version) ? `v${b.version}` : b.version;
    const bits = [b.name || b.agent, version, b.model && `model ${b.model}`];
    this.#add(h('div', { class: 'blk blk-info' }, bits.filter(Boolean).join(' · ')), frame);
    this.hooks.onInfo?.(b);
  }

  #user(b, frame) {
    this.lastUserText = b.text;
    this.#dropRetry();
    this.userIds.add(b.id);
    this.hooks.onUser?.(b.id);
    const pending = this.pending.get(b.id);
    if (pending) {
      pending.remove();
      this.pending.delete(b.id);
    }
    const atts = (b.attachments || []).map((a) => h('span', { class: 'chip' }, icon('file'), a.name));
    const when = frame.ts ? new Date(frame.ts).toLocaleString() : null;
    const bubble = h('div', { class: `blk blk-user${b.steer ? ' is-steer' : ''}`, dataset: { id: b.id }, title: when },
      b.source === 'terminal' ? h('div', { class: 'from' }, 'from the terminal') : null,
      b.steer ? h('div', { class: 'from' }, 'into the turn') : null,
      h('div', { class: 'user-text' }, b.text),
      atts.length ? h('div', { class: 'chips' }, atts) : null,
      this.hooks.userActions?.(b, frame) ?? null);
    this.#add(bubble, frame);
  }

  #delta(b, frame) {
    let msg = this.messages.get(b.id);
    if (!msg) {
      const body = h('div', { class: 'md' });
      let el;
      if (b.type === 'thinking') {
        const preview = h('span', { class: 'preview' });
        el = h('details', { class: 'blk blk-thinking streaming' },
          h('summary', {}, h('span', { class: 'label' }, 'Thinking…'), preview), body);
        msg = { el, body, preview, text: '', kind: 'thinking', parent: null, md: new MarkdownStream(body) };
      } else {
        el = h('div', { class: 'blk blk-text streaming' }, body);
        msg = { el, body, text: '', kind: 'text', md: new MarkdownStream(body) };
      }
      this.messages.set(b.id, msg);
      this.#add(el, frame);
    }
    msg.text += b.text || '';
    if (b.done) this.#closeMessage(msg);
    this.dirty.add(msg);
  }

  #closeMessage(msg) {
    msg.el.classList.remove('streaming');
    if (msg.kind === 'thinking') msg.el.querySelector('.label').textContent = 'Thinking';
  }

  #toolCard(b, frame) {
    const status = h('span', { class: 'badge status' });
    const head = h('div', { class: 'tool-head' },
      h('span', { class: 'tool-icon' }, kindIcon(b.kind)),
      h('span', { class: 'tool-name' }), h('span', { class: 'tool-title' }), status);
    const summary = h('div', { class: 'tool-summary' });
    const input = h('details', { class: 'tool-input' }, h('summary', {}, 'Input'), h('pre'));
    const extra = h('div', { class: 'tool-extra' });
    const children = h('div', { class: 'tool-children' });
    const el = h('div', { class: 'blk blk-tool', dataset: { id: b.id } },
      head, summary, input, extra, children);
    const card = { el, head, status, summary, input, extra, children, block: {} };
    this.tools.set(b.id, card);
    this.#add(el, frame, b.parent_id);
    return card;
  }

  #toolCall(b, frame) {
    const card = this.tools.get(b.id) || this.#toolCard(b, frame);
    const merged = card.block;
    for (const key of ['name', 'title', 'kind', 'status', 'parent_id']) {
      if (b[key] != null && b[key] !== '') merged[key] = b[key];
    }
    if (b.input && Object.keys(b.input).length) merged.input = b.input;
    card.head.querySelector('.tool-name').textContent = merged.name || 'tool';
    card.head.querySelector('.tool-title').textContent =
      merged.title && merged.title !== merged.name ? merged.title : '';
    card.head.querySelector('.tool-icon').replaceChildren(kindIcon(merged.kind));
    const status = merged.status || 'running';
    card.el.dataset.status = status;
    card.status.textContent = status;
    const input = merged.input || {};
    const key = SUMMARY_KEYS.find((k) => typeof input[k] === 'string' && input[k]);
    clear(card.summary);
    if (key) card.summary.append(h('code', {}, input[key]));
    card.input.hidden = !Object.keys(input).length;
    card.input.querySelector('pre').textContent = JSON.stringify(input, null, 2);
    if (status !== 'running') this.#settlePermissions(b.id);
  }

  #toolResult(b, frame) {
    let card = this.tools.get(b.tool_call_id);
    if (!card) {
      card = this.#toolCard({ id: b.tool_call_id, parent_id: b.parent_id }, frame);
      this.#toolCall({ id: b.tool_call_id, name: 'tool', status: b.is_error ? 'error' : 'done' });
    }
    const content = b.content || '';
    // a trailing newline ends the last line; it does not start another
    const lines = content.replace(/\n$/, '').split('\n').length;
    const result = h('details', { class: `tool-result${b.is_error ? ' is-error' : ''}` },
      h('summary', {}, b.is_error ? 'Error' : 'Result',
        h('span', { class: 'muted small' }, ` · ${lines} line${lines === 1 ? '' : 's'}`)),
      h('pre', {}, content || '(empty)'));
    result.open = lines <= RESULT_OPEN_LINES;
    result.dataset.seq = String(frame.seq);
    card.extra.append(result);
    this.#settlePermissions(b.tool_call_id);
  }

  #diff(b, frame) {
    const hunks = hunksOf(b);
    const { added, removed } = diffStats(hunks);
    const body = h('div', { class: 'diff-body' });
    const buttons = ['unified', 'split'].map((mode) => h('button', {
      type: 'button',
      class: 'seg',
      dataset: { mode },
      onclick: () => this.hooks.setDiffMode?.(mode),
    }, mode === 'unified' ? 'Unified' : 'Side by side'));
    const el = h('div', { class: 'blk blk-diff' },
      h('div', { class: 'diff-head' },
        h('span', { class: 'diff-path' }, b.path || '(unnamed file)'),
        b.old_text == null ? h('span', { class: 'badge new' }, 'new file') : null,
        h('span', { class: 'diff-stat' },
          h('span', { class: 'plus' }, `+${added}`), ' ', h('span', { class: 'minus' }, `−${removed}`)),
        h('span', { class: 'segmented' }, buttons)),
      body);
    const view = { hunks, body, buttons, mode: null };
    this.diffViews.add(view);
    this.#renderDiff(view);
    const card = b.tool_call_id && this.tools.get(b.tool_call_id);
    if (card) {
      el.dataset.seq = String(frame.seq);
      card.extra.append(el);
    } else {
      this.#add(el, frame);
    }
  }

  #renderDiff(view) {
    const mode = this.hooks.diffMode?.() || 'unified';
    if (view.mode === mode) return;
    view.mode = mode;
    for (const btn of view.buttons) btn.setAttribute('aria-pressed', String(btn.dataset.mode === mode));
    clear(view.body).append(mode === 'split' ? renderSplit(view.hunks) : renderUnified(view.hunks));
  }

  /** Re-render every diff after the unified / side-by-side preference changed. */
  refreshDiffs() {
    for (const view of this.diffViews) this.#renderDiff(view);
  }

  #plan(b, frame) {
    this.lastPlan?.classList.add('superseded');
    const entries = b.entries || [];
    const done = entries.filter((e) => e.status === 'completed').length;
    const el = h('div', { class: 'blk blk-plan' },
      h('div', { class: 'plan-head' }, 'Plan', h('span', { class: 'muted small' }, ` ${done}/${entries.length}`)),
      h('ol', {}, entries.map((e) => h('li', { class: `plan-${e.status}`, dataset: { status: e.status } },
        h('span', { class: 'plan-icon', 'aria-hidden': 'true' }, PLAN_ICON[e.status] || '○'),
        h('span', { class: 'plan-text' }, e.content),
        e.priority ? h('span', { class: 'badge' }, e.priority) : null))));
    this.lastPlan = this.#add(el, frame);
  }

  #permission(b, frame) {
    const note = h('div', { class: 'perm-note', role: 'status' });
    const buttons = (b.options || []).map((opt) => h('button', {
      type: 'button',
      class: `perm-opt kind-${opt.kind}`,
      dataset: { option: opt.id },
      onclick: () => this.#answer(b.id, opt),
    }, opt.label || opt.id));
    const tool = b.tool_call_id && this.tools.get(b.tool_call_id);
    const el = h('div', { class: 'blk blk-permission', dataset: { id: b.id, state: 'open' } },
      h('div', { class: 'perm-title' }, icon('lock'), ' ', b.title || 'Permission needed'),
      tool ? h('div', { class: 'muted small' }, `for ${tool.block.title || tool.block.name || 'a tool call'}`) : null,
      h('div', { class: 'perm-options' }, buttons), note);
    this.permissions.set(b.id, { el, note, buttons, toolId: b.tool_call_id, state: 'open' });
    this.#add(el, frame);
  }

  async #answer(id, opt) {
    const p = this.permissions.get(id);
    if (!p || p.state !== 'open') return;
    p.buttons.forEach((btn) => { btn.disabled = true; });
    p.note.textContent = 'Sending…';
    try {
      await this.hooks.onPermission(id, opt.id);
      this.#setPermission(p, 'answered', `You chose: ${opt.label || opt.id}`);
      p.buttons.find((btn) => btn.dataset.option === opt.id)?.classList.add('chosen');
    } catch (err) {
      if (err.code === 'not_found') {
        this.#setPermission(p, 'settled', 'This request was already answered or has expired.');
      } else {
        p.buttons.forEach((btn) => { btn.disabled = false; });
        clear(p.note).append(...codeSpans(`Could not answer: ${err.message}`));
      }
    }
  }

  #setPermission(p, state, text) {
    p.state = state;
    p.el.dataset.state = state;
    p.buttons.forEach((btn) => { btn.disabled = true; });
    if (text) p.note.textContent = text;
  }

  #settlePermissions(toolId) {
    for (const p of this.permissions.values()) {
      if (p.state === 'open' && (toolId === null || p.toolId === toolId)) {
        this.#setPermission(p, 'settled', 'Answered.');
      }
    }
  }

  #usage(b, frame) {
    const text = usageText(b);
    if (text) this.#add(h('div', { class: 'blk blk-usage' }, icon('sum', 'usage'), ' ', text), frame);
    this.hooks.onUsage?.(b);
  }

  #system(b, frame) {
    if (b.code === 'retrying') this.#dropRetry();
    if (b.code === 'terminal') {
      const command = terminalCommand({ command: b.text, cwd: b.data?.cwd });
      this.#add(h('div', { class: 'blk blk-system level-info' }, commandBox(command)), frame);
      return;
    }
    const text = b.text || b.code;
    const el = h('div', { class: `blk blk-system level-${b.level || 'info'} code-${b.code}` }, codeSpans(text),
      this.#allowSetupButton(b));
    // "idle -> running (writer: bridge): …" is the daemon's bookkeeping: the header's badge
    // shows the state; the line stays in the DOM (its seq counts) but not on screen
    if (b.code === 'state') el.hidden = true;
    this.#add(el, frame);
  }

  /** A repository's worktree setup that was skipped (not the default branch's file): a button
   *  that allows this exact file, by the hash the block names, for the next worktrees. */
  #allowSetupButton(b) {
    const d = b.code === 'worktree_setup' && b.data?.skipped ? b.data : null;
    if (!d || typeof d.sha256 !== 'string' || typeof d.path !== 'string' || !this.hooks.onAllowSetup) return null;
    const said = h('span', { class: 'allow-setup-said', role: 'status' });
    const btn = h('button', {
      type: 'button', class: 'small-btn allow-setup',
      onclick: async () => {
        if (!window.confirm(`Let ${d.path} (SHA-256 ${d.sha256.slice(0, 12)}…) run in new worktrees? Read it first.`)) return;
        btn.disabled = true;
        try {
          await this.hooks.onAllowSetup(d.path, d.sha256);
          btn.remove();
          said.textContent = 'Allowed: it runs in the next new worktrees while it stays exactly this file.';
        } catch (err) {
          btn.disabled = false;
          said.textContent = err.message;
        }
      },
    }, 'Allow this setup');
    return h('div', { class: 'allow-setup-row' }, btn, said);
  }

  #error(b, frame) {
    const hint = b.hint ? h('div', { class: 'err-hint' }) : null;
    if (hint) renderInline(b.hint, hint, { links: false });
    this.#add(h('div', { class: 'blk blk-error', role: 'alert' },
      h('div', { class: 'err-head' }, icon('warn'), ' ', codeSpans(b.message || b.code), ' ', h('span', { class: 'badge' }, b.code)),
      hint,
      b.detail ? h('details', {}, h('summary', {}, 'Details'), h('pre', {}, b.detail)) : null,
      this.#retryButton(b)), frame);
  }

  /** A "Retry" button for a retryable failure, removed again if the bridge retries by itself
   *  (a `retrying` system block follows) or the conversation moves on (a new user message). */
  #retryButton(b) {
    this.#dropRetry();
    const text = this.lastUserText;
    if (b.retryable !== true || text == null || !this.hooks.onRetry) return null;
    const after = typeof b.retry_after_s === 'number' ? ` (after ${b.retry_after_s} s)` : '';
    const btn = h('button', {
      type: 'button', class: 'retry', title: `Send your last message again${after}`,
      onclick: async () => {
        btn.disabled = true;
        try {
          await this.hooks.onRetry(text);
          btn.remove();
        } catch {
          btn.disabled = false;
        }
      },
    }, 'Retry');
    this.retryBtn = btn;
    return btn;
  }

  #dropRetry() {
    this.retryBtn?.remove();
    this.retryBtn = null;
  }

  #end(b, frame) {
    for (const msg of this.messages.values()) {
      if (msg.el.classList.contains('streaming')) {
        this.#closeMessage(msg);
        this.dirty.add(msg);
      }
    }
    this.#settlePermissions(null);
    let text = END_TEXT[b.reason] || `Turn ended (${b.reason})`;
    if (b.exit_code != null && b.exit_code !== 0) text += ` · exit ${b.exit_code}`;
    this.#add(h('div', { class: `blk blk-end reason-${b.reason}` }, h('span', {}, text)), frame);
  }

  // ---- messages this client sent that the log does not show yet ----------------------------

  addPending(id, text, attachments) {
    const note = h('span', { class: 'pending-note' }, 'sending…');
    const el = h('div', { class: 'blk blk-user is-pending', dataset: { id } },
      h('div', { class: 'user-text' }, text),
      attachments.length ? h('div', { class: 'chips' }, attachments.map((a) => h('span', { class: 'chip' }, icon('file'), a.name))) : null,
      note);
    this.pending.set(id, el);
    this.pendingEl.append(el);
    this.stick = true;
    this.#schedule();
    return {
      queued: (queued, steered = false) => {
        el.classList.remove('is-waiting');
        note.textContent = steered ? 'into the turn' : queued ? 'queued: waits for the agent' : 'sent';
      },
      failed: (message) => {
        el.classList.remove('is-waiting');
        el.classList.add('is-failed');
        clear(note).append(...codeSpans(`not sent: ${message}`));
      },
      /** In the outbox until `name` is reachable (js/net/outbox.js); `cancel` takes it out. */
      waiting: (name, cancel) => {
        el.classList.add('is-waiting');
        clear(note).append(`waiting for ${name} · `,
          h('button', { type: 'button', class: 'link-btn small outbox-cancel', onclick: cancel }, 'Cancel'));
      },
      /** On the relay's work queue (js/net/outbox.js): `name` takes it when it is back. */
      relayed: (name) => {
        el.classList.add('is-waiting', 'is-relayed');
        note.textContent = `waiting on the relay for ${name}`;
      },
      remove: () => {
        el.remove();
        this.pending.delete(id);
      },
    };
  }

  // ---- rendering ---------------------------------------------------------------------------

  #schedule() {
    if (this.frame) return;
    // Deltas arrive many per frame; render each message at most once per animation frame.
    this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    for (const msg of this.dirty) {
      msg.md.update(msg.text); // the open block only (ui/markdown.js)
      if (msg.preview) {
        const text = msg.text.trimEnd();
        const last = text.slice(text.lastIndexOf('\n') + 1).trim();
        msg.preview.textContent = last.length > 90 ? `${last.slice(0, 90)}…` : last;
      }
    }
    this.dirty.clear();
    // to the bottom without asking how far that is (a number past the end is clamped)
    if (this.stick) this.scrollToEnd();
    this.stick = false;
  }

  scrollToEnd() {
    this.scroller.scrollTop = Number.MAX_SAFE_INTEGER;
  }
}
