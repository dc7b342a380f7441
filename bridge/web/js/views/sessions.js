// The Sessions view: every workstation's sessions in one list (those that need the person
// first), the sessions found in terminals, and the New session form, which starts a session on
// the active workstation.

import { $, clear, codeSpans, h, relativeTime } from '../ui/dom.js';
import { isFoundOnDisk, stateBadge } from '../ui/session-state.js';
import { toast } from '../ui/toast.js';
import { ProjectPicker, fillModes } from './workspace.js';
import { suggestBranch } from './ship.js';

export const CWD_KEY = 'agent-bridge.cwd';

export class SessionsView {
  constructor(app) {
    this.app = app;
    this.formChosen = false;
  }

  init() {
    const app = this.app;
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
      const ws = app.stations.get($('#ns-ws').value);
      if (ws && ws !== app.active) app.show(null, ws);
    });
    this.projects = new ProjectPicker(app, $('#ns-cwd'), $('#ns-projects'));
    $('#ns-cwd').value = localStorage.getItem(CWD_KEY) || '';
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

  /** A workstation became the active one: the form is about it now. */
  activate(ws) {
    $('#ns-cwd').value = localStorage.getItem(this.app.cwdKey(ws)) || '';
    if (ws.client.isOpen) {
      this.projects.load();
      this.fillCwd();
    }
  }

  /** The workstation choice, and why no session starts where this browser is refused. */
  renderStations() {
    const app = this.app;
    const select = clear($('#ns-ws'));
    for (const ws of app.stations.values()) select.append(h('option', { value: ws.id }, ws.name));
    if (app.active) select.value = app.active.id;
    $('#ns-ws-row').hidden = app.stations.size < 2;
    const refused = app.active?.refusesBrowser ? app.active.reachNote : '';
    $('#new-session').toggleAttribute('data-refused', Boolean(refused));
    clear($('#ns-refused')).append(...codeSpans(refused));
    $('#new-session button[type=submit]').disabled = Boolean(refused);
  }

  /** The agent choice for the active workstation. */
  fillAgents(ws) {
    const agents = ws.agentList || [];
    const select = $('#ns-agent');
    const previous = select.value;
    clear(select);
    for (const a of agents) {
      const label = a.available ? a.display_name : `${a.display_name} (not available)`;
      select.append(h('option', { value: a.agent, disabled: !a.available }, label));
    }
    const firstAvailable = agents.find((a) => a.available)?.agent;
    select.value = this.app.agents.get(previous)?.available ? previous : (firstAvailable || '');
    this.loadModels();
    this.loadModes();
  }

  async loadModels() {
    const agent = this.app.agents.get($('#ns-agent').value);
    const select = $('#ns-model');
    clear(select).append(h('option', { value: '' }, 'Agent default'));
    $('#ns-model-row').hidden = !agent?.provides_models;
    if (!agent?.provides_models) return;
    try {
      const { models } = await this.app.client.request('models.list', { agent: agent.agent });
      if ($('#ns-agent').value !== agent.agent) return;
      for (const m of models) select.append(h('option', { value: m.id }, m.label || m.id));
    } catch (err) {
      select.append(h('option', { value: '', disabled: true }, `models unavailable: ${err.message}`));
    }
  }

  loadModes() {
    const agent = this.app.agents.get($('#ns-agent').value);
    $('#ns-mode-row').hidden = !fillModes($('#ns-mode'), agent, $('#ns-mode').value, true);
  }

  /**
   * A value for an empty working-directory field: the last used directory, else the newest
   * session's, else the daemon's home. The projects list under the field offers the others.
   */
  fillCwd() {
    const app = this.app;
    const input = $('#ns-cwd');
    // not into a field the person is typing in: a list that loads late would put a default
    // before what they type (an empty field mid-edit is not an empty field)
    if (input.value || document.activeElement === input) return;
    const newest = [...app.sessions.values()]
      .filter((s) => s.cwd)
      .sort((a, b) => String(b.updated_at || '').localeCompare(String(a.updated_at || '')))[0];
    input.value = localStorage.getItem(app.cwdKey()) || newest?.cwd || app.client?.server?.home || '';
    this.projects.render();
  }

  async createSession() {
    const app = this.app;
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
      const { session } = await app.client.request('session.create', { agent, cwd, model, mode, worktree });
      localStorage.setItem(app.cwdKey(), cwd);
      $('#ns-worktree').checked = false;
      $('#ns-branch-row').hidden = true;
      $('#ns-branch').value = '';
      this.projects.load();
      app.sessions.set(session.session, session);
      this.formChosen = false; // back on the list, the form folds again
      this.render();
      app.open(session.session);
    } catch (err) {
      clear(errorEl).append(...codeSpans(err.hint ? `${err.message}: ${err.hint}` : err.message));
      errorEl.hidden = false;
    } finally {
      button.disabled = false;
    }
  }

  /** One list, grouped by workstation; each group's head says the workstation's state. */
  render() {
    const app = this.app;
    const groups = [];
    const externalGroups = [];
    let ownCount = 0;
    let externalCount = 0;
    const needs = [];
    for (const ws of app.stations.values()) {
      // the sessions that need a person first, then the most recently changed
      const all = [...ws.sessions.values()].sort((a, b) => (!!b.needs - !!a.needs)
        || b.updated_at.localeCompare(a.updated_at));
      const own = all.filter((s) => !isFoundOnDisk(s));
      const external = all.filter(isFoundOnDisk);
      ownCount += own.length;
      externalCount += external.length;
      const item = (s, where = '') => h('li', { dataset: { session: s.session } }, h('button', {
        type: 'button',
        class: `session-item${app.current?.id === s.session && app.current?.ws === ws ? ' active' : ''}`,
        onclick: () => (isFoundOnDisk(s) ? this.attach(s, ws) : app.open(s.session, ws)),
      },
      h('span', { class: 'item-title' }, s.title || (s.external ? 'Terminal session' : 'New session')),
      h('span', { class: 'item-meta muted small' },
        [where, ws.agents.get(s.agent)?.display_name || s.agent, s.cwd.split('/').filter(Boolean).pop() || s.cwd,
          relativeTime(s.updated_at)].filter(Boolean).join(' · ')),
      isFoundOnDisk(s)
        ? h('span', { class: 'badge state', dataset: { state: s.state } }, s.state === 'parked' ? 'open in a terminal' : 'attach')
        : stateBadge(s)));
      const waiting = app.outbox.unsent(ws.id).length;
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
      groups.push(group(own.map((s) => item(s))));
      // every workstation's sessions that wait on the person, together at the top
      needs.push(...own.filter((s) => s.needs).map((s) => item(s, app.stations.size > 1 ? ws.name : '')));
      if (external.length) externalGroups.push(group(external.map((s) => item(s))));
    }
    clear($('#needs')).append(...needs);
    $('#needs-box').hidden = !needs.length;
    clear($('#sessions')).append(...groups);
    clear($('#external')).append(...externalGroups);
    // "No sessions yet" only where a workstation said so: not for one that cannot be asked
    $('#sessions-empty').hidden = ownCount > 0 || ![...app.stations.values()].some((ws) => ws.state === 'online');
    if (!this.formChosen) this.collapseForm(ownCount > 0);
    $('#external-empty').hidden = externalCount > 0;
    const needing = [...app.stations.values()]
      .reduce((n, ws) => n + [...ws.sessions.values()].filter((s) => s.needs).length, 0);
    if (navigator.setAppBadge) {
      (needing ? navigator.setAppBadge(needing) : navigator.clearAppBadge()).catch(() => {});
    }
  }

  updateListItem(session, ws = this.app.active) {
    const known = ws?.sessions.get(session.session);
    if (!known) return;
    const needed = Boolean(known.needs);
    Object.assign(known, session);
    if (Boolean(known.needs) !== needed) {
      this.render(); // into or out of "Needs you"
      return;
    }
    const group = `#sessions li.ws-group[data-ws="${CSS.escape(ws.id)}"]`;
    const li = $(`${group} li[data-session="${CSS.escape(session.session)}"]`);
    const old = li?.querySelector('.badge.state');
    if (old) old.replaceWith(stateBadge(known));
  }

  async attach(s, ws = this.app.active) {
    const app = this.app;
    if (ws !== app.active) app.show(null, ws);
    try {
      const { session } = await app.client.request('session.attach', {
        agent: s.agent, agent_session_id: s.agent_session_id, cwd: s.cwd,
      });
      app.sessions.delete(s.session);
      app.sessions.set(session.session, session);
      app.open(session.session);
      await app.loadSessions(); // the daemon now lists it as ours, not under "In terminals"
    } catch (err) {
      toast(`Could not attach: ${err.message}`);
    }
  }
}
