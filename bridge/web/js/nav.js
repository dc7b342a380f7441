// The views and the one navigation between them: a bottom bar on a phone, a side rail on a
// wide screen (CSS). Where the page is lives in the address bar's fragment: `#view=settings`,
// `#session=ID&ws=ID` (a session is in the Sessions view); no view is the Sessions view. Each
// move the person makes is a history entry, so the browser's back and forward walk the views
// and the sessions as they were opened, and a link or a notification lands on its view.

import { $, clear } from './ui/dom.js';
import { readFragment, writeFragment } from './ui/address.js';
import { icon } from './ui/icons.js';

export const VIEWS = ['sessions', 'search', 'usage', 'settings'];
const ICONS = { sessions: 'think', search: 'search', usage: 'usage', settings: 'settings' };
const phoneQuery = window.matchMedia('(max-width: 760px)');

/** The view a fragment names (a session is shown in the Sessions view). */
export function viewOf(params) {
  const view = params.get('view');
  if (params.has('session') || !VIEWS.includes(view)) return 'sessions';
  return view;
}

export class Navigation {
  constructor(app) {
    this.app = app;
    this.shown = null;
  }

  init() {
    for (const link of document.querySelectorAll('#nav a[data-view]')) {
      const label = link.textContent.trim();
      clear(link).append(icon(ICONS[link.dataset.view]), document.createElement('span'));
      link.lastChild.textContent = label;
      link.addEventListener('click', (ev) => {
        ev.preventDefault();
        this.go(link.dataset.view);
      });
    }
    $('#back').addEventListener('click', () => this.back());
    phoneQuery.addEventListener('change', () => this.layout());
  }

  /** The person chose a view: a new history entry; focus goes to the view's heading. */
  go(view) {
    const params = new URLSearchParams();
    if (view !== 'sessions') params.set('view', view);
    const ws = this.app.active;
    if (ws && ws.id !== 'local') params.set('ws', ws.id);
    writeFragment(params, true);
    this.app.route();
    this.focusHeading();
  }

  /** The top bar's back (a phone, in a session): the browser's back where the page made the
   *  entry it returns to, else the list in place of the session (a link opened it). */
  back() {
    if (window.history.state?.inApp) window.history.back();
    else this.app.show(null, this.app.active, false);
  }

  /** The shown view, the navigation's current item, the phone's back button. */
  layout() {
    const params = readFragment();
    const view = viewOf(params);
    const inSession = params.has('session');
    document.body.dataset.view = view;
    document.body.dataset.screen = inSession ? 'session' : 'list';
    for (const el of document.querySelectorAll('#main > .view')) el.hidden = el.dataset.view !== view;
    for (const link of document.querySelectorAll('#nav a[data-view]')) {
      if (link.dataset.view === view) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    $('#back').hidden = !(inSession && phoneQuery.matches);
    const moved = this.shown !== null && this.shown !== view;
    this.shown = view;
    return moved;
  }

  /** Keyboard and screen-reader users land on the view's heading, not at the page's top. */
  focusHeading() {
    const heading = $(`#main > .view[data-view="${this.shown}"] .view-title`);
    if (heading && !heading.closest('[hidden]')) heading.focus({ preventScroll: true });
  }
}
