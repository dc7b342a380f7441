// Steer and fork in a session view (protocol.md, `session.send` `steer` and `session.fork`):
// the composer's Steer / Queue choice while a turn runs, and "Fork from here".

import { h } from '../ui/dom.js';

/** This device's choice for a message sent while a turn runs: "steer" (default) or "queue". */
const CHOICE_KEY = 'agent-bridge.steer';

function remembered() {
  try {
    return localStorage.getItem(CHOICE_KEY) === 'queue' ? 'queue' : 'steer';
  } catch {
    return 'steer';
  }
}

/** The composer's switch shown while a turn runs: Steer (into this turn) or Queue (after it). */
export class SteerChoice {
  constructor(onChange = () => {}) {
    this.choice = remembered();
    this.running = false;
    this.canSteer = false;
    this.onChange = onChange;
    this.steerBtn = h('button', {
      type: 'button', class: 'seg', dataset: { choice: 'steer' }, onclick: () => this.set('steer'),
    }, 'Steer');
    this.queueBtn = h('button', {
      type: 'button', class: 'seg', dataset: { choice: 'queue' }, onclick: () => this.set('queue'),
    }, 'Queue');
    this.note = h('span', { class: 'steer-note muted small' });
    this.el = h('div', { class: 'steer-choice', role: 'group', 'aria-label': 'While the agent works', hidden: true },
      h('span', { class: 'seg-group' }, this.steerBtn, this.queueBtn), this.note);
    this.render();
  }

  set(choice) {
    this.choice = choice;
    try {
      localStorage.setItem(CHOICE_KEY, choice);
    } catch { /* private mode: kept for this page only */ }
    this.render();
    this.onChange();
  }

  /** A turn runs (`running`); its agent can take a message during it (`canSteer`). */
  update(running, canSteer) {
    this.running = running;
    this.canSteer = canSteer;
    this.render();
  }

  render() {
    const steer = this.steering;
    this.el.hidden = !this.running;
    this.steerBtn.disabled = !this.canSteer;
    this.steerBtn.setAttribute('aria-pressed', String(steer));
    this.queueBtn.setAttribute('aria-pressed', String(!steer));
    this.note.textContent = !this.canSteer
      ? 'this agent takes messages between turns: it waits'
      : steer ? 'goes into this turn now' : 'waits until this turn ends';
  }

  /** The message sent now goes into the running turn. */
  get steering() {
    return this.running && this.canSteer && this.choice === 'steer';
  }

  /** What the send button says. */
  get label() {
    if (!this.running) return 'Send';
    return this.steering ? 'Steer' : 'Queue';
  }
}

/** Fork `view`'s session at `atSeq` (its last event when absent) and open the fork. */
export async function forkSession(view, atSeq, onError) {
  const fields = { session: view.id };
  if (atSeq != null) fields.at_seq = atSeq;
  try {
    const { session } = await view.ws.client.request('session.fork', fields);
    view.app.sessions.set(session.session, session);
    view.app.renderSessions();
    view.app.open(session.session, view.ws);
  } catch (err) {
    onError(err);
  }
}

/** The "Fork from here" button under a user message. */
export function forkButton(onFork) {
  return h('button', {
    type: 'button', class: 'link-btn small fork-here', title: 'A new session with the conversation up to here',
    onclick: onFork,
  }, 'Fork from here');
}
