// The Settings view: the workstations this browser reaches and pairing another, the agents of
// the active workstation, notifications (views/attention.js renders that part) and this device.

import { $, clear, codeSpans, h } from '../ui/dom.js';
import { toast } from '../ui/toast.js';
import { LOCAL, deviceName } from '../net/workstations.js';

/** How long "Paired with …" stays under the pairing form. */
const PAIRED_NOTE_MS = 6000;

export class SettingsView {
  constructor(app) {
    this.app = app;
    this.noteTimer = null;
  }

  init() {
    for (const form of ['#ws-add', '#login-link']) {
      $(form).addEventListener('submit', (ev) => {
        ev.preventDefault();
        const input = $(form).querySelector('input');
        const text = input.value.trim();
        input.value = '';
        if (text) this.app.addFromLink(text);
      });
    }
  }

  /** The pairing's progress under both pairing forms (Settings, and the sign-in page): a
   *  success is said, then gets out of the way; an error stays until the next try. */
  sayPairing(text, { error = false, fades = false } = {}) {
    const shown = [$('#pair-status'), $('#login-pair-status')];
    for (const el of shown) {
      el.hidden = false;
      el.className = error ? 'error-text small' : 'muted small';
      clear(el).append(...codeSpans(text));
    }
    clearTimeout(this.noteTimer);
    if (fades) this.noteTimer = setTimeout(() => { for (const el of shown) el.hidden = true; }, PAIRED_NOTE_MS);
    // said once: a toast too only where neither note is on screen (a phone in a session)
    if (error && !shown.some((el) => el.getClientRects().length)) toast(text);
  }

  /** This device: the name workstations know it by, and what the browser keeps. */
  renderDevice() {
    const app = this.app;
    $('#device-name').textContent = deviceName(navigator.userAgent, navigator.platform);
    const relayed = [...app.stations.values()].filter((ws) => ws.id !== LOCAL).length;
    const token = localStorage.getItem('agent-bridge.token') ? 'kept on this device'
      : sessionStorage.getItem('agent-bridge.token') ? 'kept for this tab only' : 'not kept here';
    $('#device-kept').textContent = `This computer's daemon token: ${token}. Other workstations `
      + `paired in this browser: ${relayed} (their keys stay in this browser's storage).`;
  }

  /** The workstations section. */
  renderStations() {
    const app = this.app;
    this.renderDevice();
    const list = clear($('#stations'));
    for (const ws of app.stations.values()) {
      list.append(h('li', { class: 'station', dataset: { ws: ws.id, state: ws.state } },
        h('span', { class: 'dot', 'aria-hidden': 'true' }),
        h('span', { class: 'station-name' }, ws.name),
        h('span', { class: 'muted small' }, ws.kind === 'relay' ? `relay · ${ws.record.host}` : 'direct'),
        h('span', { class: 'badge ws-state', dataset: { state: ws.state } }, ws.stateLabel),
        h('button', {
          type: 'button', class: 'link-btn small', title: `Remove ${ws.name} from this browser`,
          onclick: () => {
            if (!window.confirm(`Remove ${ws.name} from this browser?`)) return;
            if (ws.id === LOCAL) app.signOut();
            else app.removeStation(ws);
          },
        }, 'Remove')));
    }
  }

  /** The agents section: the active workstation's agents, each with a Check. */
  renderAgents(ws) {
    const app = this.app;
    const agents = ws.agentList || [];
    $('#agents-title').textContent = app.stations.size > 1 ? `Agents on ${ws.name}` : 'Agents';
    const list = clear($('#agents'));
    const row = (a) => {
      const caps = Object.entries(a.capabilities || {}).filter(([, on]) => on).map(([c]) => c);
      const result = h('div', { class: 'check-result small' });
      const check = h('button', {
        type: 'button', class: 'small-btn',
        onclick: async () => {
          result.textContent = 'Checking…';
          try {
            const r = await app.client.request('agents.check', { agent: a.agent });
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
}
