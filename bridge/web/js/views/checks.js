// A branch's CI checks in the Branch view (docs/protocol.md, "CI checks"): each check with its
// state, asked again while any is pending, and "Ask the agent to fix" on a failed one, which
// sends the session one message with the check's name, URL and its log's tail.

import { appendAll, clear, codeSpans, h } from '../ui/dom.js';


const LABELS = {
  pending: 'running', success: 'passed', failure: 'failed', cancelled: 'cancelled', skipped: 'skipped',
};

/** The one message a failed check reaches the agent as. */
export function fixText(check, log) {
  const fence = log.log.includes('```') ? '~~~~' : '```';
  return `The CI check "${check.name}" failed on this branch${check.url ? ` (${check.url})` : ''}.`
    + ' Find the cause in its log below, fix it, and run the failing part locally before you stop.\n\n'
    + `Last lines of its log${log.truncated ? ' (cut)' : ''}:\n${fence}\n${log.log}\n${fence}`;
}

export class ChecksBox {
  /** How often the checks are asked again while one is pending. */
  static refreshMs = 15000;

  /** request(method, fields): a workspace request for the Branch view's path; send(text): a
   *  message to the session. */
  constructor({ request, send }) {
    this.request = request;
    this.send = send;
    this.el = h('section', { class: 'checks', 'aria-label': 'CI checks' });
    this.timer = null;
  }

  /** Ask now, and again every refreshMs while one is pending and the box is on screen. */
  async refresh() {
    clearTimeout(this.timer);
    let r;
    try {
      r = await this.request('workspace.checks', {});
    } catch (err) {
      appendAll(clear(this.el), [h('h3', {}, 'Checks'),
        h('p', { class: 'muted small checks-none' }, ...codeSpans(err.message)),
        err.hint ? h('p', { class: 'muted small ship-hint' }, ...codeSpans(err.hint)) : null]);
      return;
    }
    this.render(r);
    if (r.checks.some((c) => c.state === 'pending')) {
      this.timer = setTimeout(() => { if (this.el.isConnected) this.refresh(); }, ChecksBox.refreshMs);
    }
  }

  render(r) {
    const rows = r.checks.map((c) => h('li', { class: `check check-${c.state}`, dataset: { name: c.name } },
      h('span', { class: 'check-state', 'aria-label': LABELS[c.state] }, LABELS[c.state]), ' ',
      c.url ? h('a', { href: c.url, target: '_blank', rel: 'noopener noreferrer' }, c.name) : h('span', {}, c.name),
      c.state === 'failure'
        ? h('button', { type: 'button', class: 'small-btn check-fix', onclick: (ev) => this.fix(c, ev.target) }, 'Ask the agent to fix')
        : null));
    appendAll(clear(this.el), [
      h('h3', {}, 'Checks', r.pr ? h('a', { class: 'checks-pr', href: r.pr.url, target: '_blank', rel: 'noopener noreferrer' }, ` #${r.pr.number}`) : null),
      rows.length ? h('ul', { class: 'checks-list' }, rows) : h('p', { class: 'muted small checks-none' }, 'No checks on this branch yet.'),
      this.note = h('div', { class: 'checks-note', role: 'status' })]);
  }

  async fix(check, button) {
    button.disabled = true;
    clear(this.note).append(h('p', { class: 'muted small' }, `Reading ${check.name}'s log…`));
    try {
      const log = await this.request('workspace.check_log', { check: check.name });
      await this.send(fixText(check, log));
      clear(this.note).append(h('p', { class: 'ok-text' }, `Sent ${check.name}'s failure to the agent.`));
    } catch (err) {
      appendAll(clear(this.note), [h('p', { class: 'error-text' }, ...codeSpans(err.message)),
        err.hint ? h('p', { class: 'ship-hint' }, ...codeSpans(err.hint)) : null]);
      button.disabled = false;
    }
  }

  stop() {
    clearTimeout(this.timer);
  }
}
