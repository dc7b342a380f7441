// Projects, the workspace's changes and agent modes (docs/protocol.md, "Projects, workspace,
// modes"): the project picker of the new-session form, the "Changes" view of a session
// (git status, a file's diff with the transcript's diff renderer, the file itself) and the
// mode picker of the session header. Everything from the daemon is shown as text.

import { appendAll, clear, h, relativeTime } from '../ui/dom.js';
import { diffStats, parseUnified, renderSplit, renderUnified } from '../ui/diff.js';
import { BranchView } from './ship.js';

const SHOWN_PROJECTS = 8;
const PATH_CHARS = 44;

/** The end of a long path is what tells projects apart: keep it, cut the start. */
function shortPath(path) {
  return path.length > PATH_CHARS ? `…${path.slice(-(PATH_CHARS - 1))}` : path;
}

function gitBadge(git) {
  if (!git) return null;
  const bits = [git.branch || 'detached'];
  if (git.ahead) bits.push(`↑${git.ahead}`);
  if (git.behind) bits.push(`↓${git.behind}`);
  return h('span', { class: `tag git${git.dirty ? ' dirty' : ''}`, title: git.dirty ? 'uncommitted changes' : 'clean' },
    git.dirty ? '● ' : '', bits.join(' '));
}

/** The list under the new-session form's directory field: search, recent first, click to pick. */
export class ProjectPicker {
  constructor(app, input, list) {
    this.app = app;
    this.input = input;
    this.list = list;
    this.projects = [];
    // Only what the person typed filters the list; a prefilled or picked value does not.
    this.filtering = false;
    input.addEventListener('input', () => { this.filtering = true; this.render(); });
    input.addEventListener('focus', () => this.render());
  }

  async load() {
    try {
      ({ projects: this.projects } = await this.app.client.request('projects.list'));
    } catch {
      this.projects = []; // an older daemon: the typed path still works
    }
    this.render();
  }

  matches() {
    const q = this.input.value.trim().toLowerCase();
    if (!q || !this.filtering) return this.projects;
    return this.projects.filter((p) => p.name.toLowerCase().includes(q) || p.path.toLowerCase().includes(q));
  }

  render() {
    const found = this.matches();
    clear(this.list);
    this.list.hidden = !this.projects.length;
    for (const p of found.slice(0, SHOWN_PROJECTS)) {
      const picked = p.path === this.input.value.trim();
      this.list.append(h('li', {}, h('button', {
        type: 'button',
        class: `project-item${picked ? ' active' : ''}`,
        dataset: { path: p.path },
        title: p.path,
        onclick: () => { this.input.value = p.path; this.filtering = false; this.render(); },
      },
      h('span', { class: 'item-title' }, p.name),
      gitBadge(p.git),
      h('span', { class: 'item-meta muted small' },
        [shortPath(p.path), p.last_used ? relativeTime(p.last_used) : null].filter(Boolean).join(' · ')))));
    }
    if (!found.length && this.projects.length) {
      this.list.append(h('li', { class: 'muted small project-none' }, 'No project matches; the path is used as typed.'));
    } else if (found.length > SHOWN_PROJECTS) {
      this.list.append(h('li', { class: 'muted small project-none' }, `${found.length - SHOWN_PROJECTS} more: type to narrow`));
    }
  }
}

/** Fill a <select> with an agent's modes; hidden (and empty) when the agent has none. */
export function fillModes(select, agent, current, withDefault) {
  const modes = agent?.modes || [];
  clear(select);
  if (withDefault) select.append(h('option', { value: '' }, 'Agent default'));
  for (const m of modes) select.append(h('option', { value: m.id, title: m.description || '' }, m.label || m.id));
  select.value = current && modes.some((m) => m.id === current) ? current : (withDefault ? '' : modes[0]?.id || '');
  select.title = modes.find((m) => m.id === select.value)?.description || 'Mode';
  return modes.length > 0;
}

/** The mode picker of a session header. */
export function modePicker(view) {
  const select = h('select', { class: 'mode-select', 'aria-label': 'Mode' });
  select.addEventListener('change', async () => {
    const mode = select.value;
    const before = view.session.mode;
    try {
      const r = await view.app.client.request('session.mode', { session: view.id, mode });
      view.session.mode = r.mode;
      view.app.notify(`Mode ${select.selectedOptions[0]?.textContent || mode}: ${r.live ? 'in effect now' : 'from the next turn'}`, 'info');
    } catch (err) {
      view.session.mode = before;
      view.app.notify(`Could not switch the mode: ${err.message}`);
    }
    renderMode(view);
  });
  return select;
}

export function renderMode(view) {
  const has = fillModes(view.modeSelect, view.agent, view.session.mode, false);
  view.modeSelect.hidden = !has;
  view.modeSelect.disabled = view.session.state === 'ended';
}

/** A `system` block `code: "mode"` (a switch, or the agent changing its own mode) moves the picker. */
export function followMode(view, frame) {
  const b = frame.block;
  const mode = b?.type === 'system' && b.code === 'mode' ? b.data?.mode : null;
  if (typeof mode !== 'string' || mode === view.session.mode) return;
  if (!(view.agent?.modes || []).some((m) => m.id === mode)) return;
  view.session.mode = mode;
  renderMode(view);
}

const STATUS_LABEL = {
  modified: 'M', added: 'A', deleted: 'D', renamed: 'R', copied: 'C', untracked: 'U',
  conflicted: '!', type_changed: 'T',
};

/** A session's "Changes": git status of its directory, a file's diff, the file itself. */
export class ChangesPanel {
  constructor(view) {
    this.view = view;
    this.titleEl = h('span', { class: 'changes-title' }, 'Changes');
    this.body = h('div', { class: 'changes-body' });
    this.backBtn = h('button', { type: 'button', class: 'link-btn', hidden: true, onclick: () => this.showStatus() }, '← Files');
    this.branch = new BranchView(this);
    // a worktree session's whole branch against its base, or the working tree's changes
    this.modeBtn = h('button', {
      type: 'button', class: 'small-btn changes-mode', hidden: true,
      onclick: () => (this.showing === 'branch' ? this.showStatus() : this.showBranch()),
    }, 'Branch');
    this.el = h('section', { class: 'changes', hidden: true, 'aria-label': 'Changes' },
      h('div', { class: 'changes-head' }, this.backBtn, this.titleEl, this.modeBtn,
        h('button', { type: 'button', class: 'small-btn', onclick: () => this.refresh() }, 'Refresh'),
        h('button', { type: 'button', class: 'small-btn', onclick: () => this.view.toggleChanges(false) }, 'Close')),
      this.body);
    this.file = null;
  }

  get path() {
    return this.view.session.cwd;
  }

  request(method, fields) {
    return this.view.app.client.request(method, { path: this.path, ...fields });
  }

  refresh() {
    if (this.showing === 'branch') return this.showBranch();
    return this.file ? this.showDiff(this.file) : this.showStatus();
  }

  /** What the panel shows when it opens: a worktree session's branch, else the changes. */
  open() {
    return this.view.session.worktree ? this.showBranch() : this.showStatus();
  }

  showing = 'changes';

  #mode(which) {
    this.showing = which;
    this.modeBtn.hidden = !this.view.session.worktree;
    // not "Changes": the header's Changes opens this panel; this shows the uncommitted ones
    this.modeBtn.textContent = which === 'branch' ? 'Uncommitted' : 'Branch';
  }

  showBranch() {
    this.#mode('branch');
    return this.branch.show();
  }

  message(text, cls = 'muted') {
    clear(this.body).append(h('p', { class: `changes-msg ${cls}` }, text));
  }

  async showStatus() {
    this.#mode('changes');
    this.file = null;
    this.backBtn.hidden = true;
    this.titleEl.textContent = 'Changes';
    this.message('Loading…');
    let st;
    try {
      st = await this.request('workspace.status', {});
    } catch (err) {
      this.message(err.message, 'error-text');
      return;
    }
    const branch = [st.branch || 'detached HEAD', st.ahead ? `↑${st.ahead}` : '', st.behind ? `↓${st.behind}` : '']
      .filter(Boolean).join(' ');
    this.titleEl.textContent = `Changes · ${branch}`;
    if (!st.files.length) {
      this.message('No changes: the working tree is clean.');
      return;
    }
    const list = h('ul', { class: 'changes-list' });
    for (const f of st.files) {
      list.append(h('li', {}, h('button', {
        type: 'button', class: 'change-item', dataset: { path: f.path, status: f.status },
        onclick: () => this.showDiff(f),
      },
      h('span', { class: `change-status st-${f.status}`, title: f.status }, STATUS_LABEL[f.status] || '?'),
      h('span', { class: 'change-path' }, f.orig_path ? `${f.orig_path} → ${f.path}` : f.path),
      h('span', { class: 'muted small' }, [f.staged ? 'staged' : '', f.unstaged ? 'unstaged' : '', f.submodule ? 'submodule' : '']
        .filter(Boolean).join(', ')))));
    }
    clear(this.body).append(list);
  }

  async showDiff(f) {
    this.file = f;
    this.backBtn.hidden = false;
    this.titleEl.textContent = f.path;
    this.message('Loading…');
    const viewBtn = f.status === 'deleted' || f.submodule ? null
      : h('button', { type: 'button', class: 'small-btn', onclick: () => this.showFile(f) }, 'View file');
    try {
      const parts = [];
      if (f.staged && f.unstaged) {
        parts.push(['Staged', await this.request('workspace.diff', { file: f.path, staged: true })]);
        parts.push(['Not staged', await this.request('workspace.diff', { file: f.path })]);
      } else {
        parts.push([null, await this.request('workspace.diff', { file: f.path, staged: Boolean(f.staged && !f.unstaged) })]);
      }
      const out = [];
      for (const [label, d] of parts) {
        if (label) out.push(h('h3', { class: 'changes-sub' }, label));
        out.push(this.renderDiff(d));
      }
      clear(this.body).append(h('div', { class: 'changes-actions' }, viewBtn), ...out);
    } catch (err) {
      this.message(err.message, 'error-text');
    }
  }

  renderDiff(d) {
    const notes = [];
    if (d.truncated) notes.push(h('p', { class: 'changes-note warn' }, 'The diff is too large: only its first megabyte is shown.'));
    if (/^Binary files .* differ$/m.test(d.diff)) {
      return h('div', {}, h('p', { class: 'changes-msg muted' }, 'Binary file changed (no text diff).'), notes);
    }
    const hunks = parseUnified(d.diff);
    if (!hunks.length) return h('div', {}, h('p', { class: 'changes-msg muted' }, d.diff.trim() || 'No textual changes.'), notes);
    const { added, removed } = diffStats(hunks);
    const table = this.view.app.diffMode() === 'split' && window.matchMedia('(min-width: 761px)').matches
      ? renderSplit(hunks) : renderUnified(hunks);
    return h('div', { class: 'blk-diff changes-diff' },
      h('div', { class: 'diff-head' }, h('span', { class: 'diff-stat' },
        h('span', { class: 'plus' }, `+${added}`), ' ', h('span', { class: 'minus' }, `-${removed}`))),
      notes, h('div', { class: 'diff-body' }, table));
  }

  async showFile(f) {
    this.message('Loading…');
    let r;
    try {
      r = await this.request('workspace.file', { file: f.path });
    } catch (err) {
      this.message(err.message, 'error-text');
      return;
    }
    const back = h('button', { type: 'button', class: 'small-btn', onclick: () => this.showDiff(f) }, 'Show diff');
    const size = `${r.size.toLocaleString()} bytes`;
    const content = r.binary
      ? h('p', { class: 'changes-msg muted' }, `Binary file, ${size}: not shown.`)
      : h('pre', { class: 'file-view' }, r.text);
    appendAll(clear(this.body), [h('div', { class: 'changes-actions' }, back, h('span', { class: 'muted small' }, size)),
      r.truncated ? h('p', { class: 'changes-note warn' }, 'Only the first megabyte is shown.') : null, content]);
  }
}
