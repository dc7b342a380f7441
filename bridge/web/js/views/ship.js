// Ship from the phone (docs/protocol.md, "Ship from the phone"): a worktree session's whole
// branch against its base, comments on its lines sent back to the agent as one message, and
// commit, push, pull request and the worktree's removal. Everything from the daemon is text.

import { appendAll, clear, codeSpans, h } from '../ui/dom.js';
import { diffStats, parseUnified, renderSplit, renderUnified } from '../ui/diff.js';
import { ChecksBox } from './checks.js';

export const DRAFT_PROMPT = 'Draft a commit message for the changes on this branch: a first line of at '
  + 'most 72 characters, a blank line, then why. Reply with the message only; do not commit.';

/** The per-file parts of a multi-file unified diff: [{path, text}]. */
export function splitFiles(diff) {
  const parts = [];
  for (const chunk of diff.split(/^(?=diff --git )/m)) {
    const m = /^diff --git a\/(.*?) b\/(.*)$/m.exec(chunk);
    if (m) parts.push({ path: m[2], text: chunk });
  }
  return parts;
}

/** A branch name suggested for a new worktree: the project's name and the moment. */
export function suggestBranch(cwd, now = new Date()) {
  const name = (cwd.split('/').filter(Boolean).pop() || 'work').toLowerCase().replace(/[^a-z0-9._-]+/g, '-');
  const pad = (n) => String(n).padStart(2, '0');
  return `agent/${name}-${pad(now.getMonth() + 1)}${pad(now.getDate())}-${pad(now.getHours())}${pad(now.getMinutes())}`;
}

/** What a refused request said: its message, the hint, and git's (or a hook's) words. */
export function failure(err) {
  return h('div', { class: 'ship-error', role: 'alert' },
    h('p', { class: 'error-text' }, ...codeSpans(err.message)),
    err.hint ? h('p', { class: 'ship-hint' }, ...codeSpans(err.hint)) : null,
    err.output ? h('pre', { class: 'ship-output' }, err.output) : null);
}

export class BranchView {
  constructor(panel) {
    this.panel = panel;
    this.comments = [];
    this.statusEl = h('div', { class: 'ship-status', role: 'status' });
    // the worktree was removed: the view says so instead of a diff and its actions
    this.gone = false;
    this.checks = new ChecksBox({
      request: (method, fields) => this.panel.request(method, fields),
      // sent, the session's transcript shows it: the view goes back there, as for a review
      send: async (text) => {
        await this.view.app.client.request('session.send', {
          session: this.view.session.session, text, client_msg_id: `fix-${Date.now().toString(36)}`,
        });
        this.view.toggleChanges(false);
      },
    });
  }

  get view() {
    return this.panel.view;
  }

  get worktree() {
    return this.view.session.worktree;
  }

  say(...nodes) {
    clear(this.statusEl).append(...nodes.filter(Boolean));
  }

  async show() {
    const wt = this.worktree;
    this.panel.file = null;
    this.panel.backBtn.hidden = true;
    this.panel.titleEl.textContent = `Branch · ${wt.branch}`;
    if (this.gone) return this.showGone();
    this.panel.message('Loading…');
    let r;
    try {
      r = await this.panel.request('workspace.diff', { base: wt.base });
    } catch (err) {
      // removed here, from another client or a terminal: the daemon has no directory there
      if (err.code === 'not_found' && this.view.session.state === 'ended') {
        this.gone = true;
        return this.showGone();
      }
      clear(this.panel.body).append(failure(err));
      return;
    }
    if (this.gone) return this.showGone(); // removed while the diff was on its way
    const counts = `${r.ahead} ahead, ${r.behind} behind ${r.base}`;
    const commits = r.commits.length
      ? h('ul', { class: 'ship-commits' }, r.commits.map((c) => h('li', {},
        h('code', {}, c.sha.slice(0, 8)), ' ', c.subject)))
      : h('p', { class: 'muted small' }, 'No commits on the branch yet.');
    const files = splitFiles(r.diff).map((f) => this.fileSection(f, r.files.length <= 5));
    const empty = files.length ? null : h('p', { class: 'changes-msg muted' }, 'The branch changes nothing yet.');
    appendAll(clear(this.panel.body), [
      h('div', { class: 'ship-summary' }, h('span', { class: 'ship-counts' }, counts)),
      commits, this.checks.el,
      r.truncated ? h('p', { class: 'changes-note warn' }, 'The diff is too large: only its first megabyte is shown.') : null,
      ...files, empty,
      this.reviewBox(), this.actions(), this.statusEl]);
    this.checks.refresh();
  }

  fileSection(file, open) {
    const hunks = parseUnified(file.text);
    const { added, removed } = diffStats(hunks);
    // side by side on a wide screen when that is the chosen diff mode, as the Changes view does
    const split = this.view.app.diffMode() === 'split' && window.matchMedia('(min-width: 761px)').matches;
    const table = split ? renderSplit(hunks) : renderUnified(hunks);
    table.addEventListener('click', (ev) => this.pick(ev, file.path));
    for (const c of this.comments.filter((x) => x.file === file.path)) this.mark(table, c.line);
    return h('details', { class: 'ship-file', open, dataset: { path: file.path } },
      h('summary', {}, h('span', { class: 'change-path' }, file.path), ' ',
        h('span', { class: 'plus' }, `+${added}`), ' ', h('span', { class: 'minus' }, `-${removed}`)),
      h('div', { class: 'blk-diff changes-diff' }, h('div', { class: 'diff-body' }, table)));
  }

  /** A tap on a line of the diff: a comment form under it. */
  pick(ev, path) {
    const row = ev.target.closest('tr');
    if (!row || row.classList.contains('hunk') || row.classList.contains('ship-comment-row')) return;
    const [oldCell, newCell] = row.querySelectorAll('td.ln');
    const line = Number(newCell?.textContent || oldCell?.textContent || 0);
    if (!line) return;
    row.parentElement.querySelector('.ship-comment-row')?.remove();
    const text = h('textarea', { rows: 2, placeholder: `Comment on ${path}:${line}`, 'aria-label': 'Comment' });
    const add = () => {
      if (!text.value.trim()) return;
      // the commented line as shown: unified rows start with their sign, split rows do not
      const code = [...row.querySelectorAll('td.code')].filter((td) => td.textContent).pop();
      const excerpt = code ? code.textContent.replace(/^[-+ ]/, (c) => (row.closest('.unified') ? '' : c)) : '';
      this.comments.push({ file: path, line, text: text.value.trim(), excerpt });
      form.remove();
      this.mark(row.closest('table'), line);
      this.renderReview();
    };
    const form = h('tr', { class: 'ship-comment-row' }, h('td', { colspan: row.closest('.split') ? 4 : 3 },
      text, h('div', { class: 'ship-row' },
        h('button', { type: 'button', class: 'primary small-btn', onclick: add }, 'Add comment'),
        h('button', { type: 'button', class: 'small-btn', onclick: () => form.remove() }, 'Cancel'))));
    row.after(form);
    text.focus();
  }

  mark(table, line) {
    for (const row of table.querySelectorAll('tr')) {
      const cells = row.querySelectorAll('td.ln');
      if (cells.length && Number(cells[1]?.textContent || cells[0]?.textContent) === line) row.classList.add('commented');
    }
  }

  reviewBox() {
    this.reviewEl = h('div', { class: 'ship-review' });
    this.renderReview();
    return this.reviewEl;
  }

  renderReview() {
    const n = this.comments.length;
    const list = h('ul', { class: 'ship-comments' }, this.comments.map((c, i) => h('li', {},
      h('code', {}, `${c.file}:${c.line}`), ' ', c.text, ' ',
      h('button', {
        type: 'button', class: 'link-btn small', 'aria-label': 'Remove comment',
        onclick: () => { this.comments.splice(i, 1); this.renderReview(); },
      }, 'Remove'))));
    appendAll(clear(this.reviewEl), [
      h('p', { class: 'muted small' }, n ? `${n} comment${n === 1 ? '' : 's'} to send` : 'Tap a line of the diff to comment on it.'),
      n ? list : null,
      h('button', { type: 'button', class: 'primary ship-send-review', disabled: !n, onclick: () => this.sendReview() },
        `Send review${n ? ` (${n})` : ''}`)]);
  }

  async sendReview() {
    const comments = this.comments.map(({ file, line, text, excerpt }) => ({ file, line, text, excerpt }));
    try {
      await this.view.app.client.request('session.review', {
        session: this.view.session.session, comments,
        client_msg_id: `review-${Date.now().toString(36)}`,
      });
    } catch (err) {
      this.say(failure(err));
      return;
    }
    this.comments = [];
    this.renderReview();
    this.say(h('p', { class: 'ok-text' }, `Sent ${comments.length} comment${comments.length === 1 ? '' : 's'} to the agent.`));
    this.view.toggleChanges(false);
  }

  actions() {
    this.messageEl = h('input', { class: 'ship-message', placeholder: 'Commit message', 'aria-label': 'Commit message' });
    const btn = (label, cls, run) => h('button', { type: 'button', class: `small-btn ${cls}`, onclick: run }, label);
    return h('div', { class: 'ship-actions' },
      h('div', { class: 'ship-row' }, this.messageEl, btn('Commit all', 'ship-commit', () => this.commit())),
      h('div', { class: 'ship-row' }, btn('Ask the agent to draft the message', 'ship-draft', () => this.draft())),
      h('div', { class: 'ship-row' },
        btn('Push', 'ship-push', () => this.push()),
        btn('Open pull request', 'ship-pr', () => this.pr()),
        this.view.session.state === 'ended' ? btn('Remove worktree', 'danger ship-remove', () => this.remove()) : null));
  }

  async run(what, method, fields, done) {
    this.say(h('p', { class: 'muted' }, `${what}…`));
    try {
      const r = await this.panel.request(method, fields);
      this.say(...done(r));
      return r;
    } catch (err) {
      this.say(failure(err));
      return null;
    }
  }

  async commit() {
    const message = this.messageEl.value.trim();
    if (!message) {
      this.say(h('p', { class: 'error-text' }, 'Write a commit message first.'));
      return;
    }
    const r = await this.run('Committing', 'workspace.commit', { message, all: true },
      (x) => [h('p', { class: 'ok-text' }, `Committed ${x.commit.slice(0, 8)} on ${x.branch}.`)]);
    if (r) {
      const status = this.statusEl.cloneNode(true);
      await this.show();
      clear(this.statusEl).append(...status.childNodes);
    }
  }

  /** The agent writes the commit message (it knows why it changed what it changed); the
   *  person reads it in the transcript and pastes or edits it here. */
  async draft() {
    try {
      await this.view.app.client.request('session.send', {
        session: this.view.session.session, text: DRAFT_PROMPT,
        client_msg_id: `draft-${Date.now().toString(36)}`,
      });
    } catch (err) {
      this.say(failure(err));
      return;
    }
    this.view.toggleChanges(false);
  }

  push() {
    return this.run('Pushing', 'workspace.push', {},
      (x) => [h('p', { class: 'ok-text' }, `Pushed ${x.branch} to ${x.remote}.`)]);
  }

  pr() {
    return this.run('Opening the pull request', 'workspace.pr', { base: this.worktree.base },
      (x) => [h('p', { class: 'ok-text' }, x.created ? 'Pull request opened: ' : 'Open the pull request here: ',
        h('a', { href: x.url, target: '_blank', rel: 'noopener noreferrer', class: 'ship-pr-link' }, x.url)),
      x.checks ? h('p', { class: 'muted small' }, `Checks: ${x.checks}`) : null]);
  }

  async remove() {
    if (!window.confirm(`Remove the worktree ${this.worktree.path}?`)) return;
    const r = await this.run('Removing the worktree', 'workspace.worktree_remove', {},
      (x) => [h('p', { class: 'ok-text' }, `Removed ${x.removed}.`)]);
    if (r) {
      this.gone = true;
      this.comments = [];
      this.showGone();
    }
  }

  /** A removed worktree: nothing to review, commit, push or open a pull request from. */
  showGone() {
    const wt = this.worktree;
    this.panel.modeBtn.hidden = true;
    this.panel.titleEl.textContent = `Removed · ${wt.branch}`;
    appendAll(clear(this.panel.body), [
      h('div', { class: 'ship-gone', role: 'status' },
        h('p', {}, 'This worktree is gone: ', h('code', {}, wt.path), ' was removed.'),
        h('p', { class: 'muted small' }, 'Its branch ', h('code', {}, wt.branch),
          ' stays in the repository ', h('code', {}, wt.repo), '; what was pushed is on the remote.')),
      this.statusEl]);
  }
}
