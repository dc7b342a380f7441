// Search every workstation at once: `sessions.search` asked of each one in parallel, the hits
// merged by rank and time; a workstation that is away is named, not waited for. A hit opens
// its session scrolled to the event that holds the text (`#session=ID&seq=N`, `&ws=ID`).
//
// mount(app, el) fills `el` and needs of `app` only: `stations` (a Map of workstations with
// `id`, `name`, `client`), `show(sessionId, ws)` and `current` (the shown session's view).

import { clear, h, relativeTime } from '../ui/dom.js';

/** How long a workstation may take to answer before the others are shown without it. */
const ANSWER_MS = 8000;
const LIMIT = 50;

/** The words and phrases of a query, lower-cased, for highlighting (as the daemon splits it). */
export function queryTerms(query) {
  const out = [];
  const re = /"([^"]*)"?|(\S+)/g;
  for (const m of String(query).matchAll(re)) {
    const text = (m[1] ?? m[2] ?? '').replace(/\*+$/, '').trim().toLowerCase();
    if (text) out.push(text);
  }
  return out;
}

/** `text` as nodes, each occurrence of a term in a <mark> (text nodes only: no HTML). */
export function highlighted(text, terms) {
  const lower = text.toLowerCase();
  const nodes = [];
  let at = 0;
  while (at < text.length && terms.length) {
    let best = -1;
    let len = 0;
    for (const t of terms) {
      const i = lower.indexOf(t, at);
      if (i >= 0 && (best < 0 || i < best)) { best = i; len = t.length; }
    }
    if (best < 0) break;
    if (best > at) nodes.push(text.slice(at, best));
    nodes.push(h('mark', {}, text.slice(best, best + len)));
    at = best + len;
  }
  nodes.push(text.slice(at));
  return nodes;
}

/** Hits of several workstations as one list: best score first, then newest. */
export function mergeHits(answers) {
  const all = [];
  for (const { ws, hits } of answers) for (const hit of hits) all.push({ ws, hit });
  all.sort((a, b) => (b.hit.score - a.hit.score) || (Date.parse(b.hit.ts) - Date.parse(a.hit.ts)));
  return all;
}

function withTimeout(promise, ms) {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('no answer in time')), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Ask every workstation; `{answers: [{ws, hits}], away: [{ws, why}]}`. */
export async function searchAll(stations, query, fields = {}) {
  const answers = [];
  const away = [];
  await Promise.all([...stations].map(async (ws) => {
    if (!ws.client?.isOpen) {
      away.push({ ws, why: 'away' });
      return;
    }
    try {
      const result = await withTimeout(ws.client.request('sessions.search', { query, limit: LIMIT, ...fields }), ANSWER_MS);
      answers.push({ ws, hits: result.hits || [] });
    } catch (err) {
      away.push({ ws, why: err.code === 'unknown_method' ? 'its daemon is older (no search)' : (err.message || 'no answer') });
    }
  }));
  return { answers, away };
}

/** Scroll `view` (a session view) to the element of the event at or before `seq`, once the
 *  replay has reached it; it is marked for a moment. */
export function revealSeq(view, seq) {
  const find = () => {
    let best = null;
    let bestSeq = -1;
    for (const el of view.el.querySelectorAll('[data-seq]')) {
      const s = Number(el.dataset.seq);
      if (s <= seq && s > bestSeq) { best = el; bestSeq = s; }
    }
    return best;
  };
  const attempt = () => {
    if ((view.transcript.lastSeq || 0) < seq) return false;
    const el = find();
    if (!el) return false;
    view.transcript.stick = false;
    el.scrollIntoView({ block: 'center' });
    el.classList.add('search-hit');
    setTimeout(() => el.classList.remove('search-hit'), 4000);
    return true;
  };
  if (attempt()) return;
  const watch = new MutationObserver(() => { if (attempt()) watch.disconnect(); });
  watch.observe(view.el, { childList: true, subtree: true });
  setTimeout(() => watch.disconnect(), 20000);
}

/** Open a hit: its workstation, its session, scrolled to its seq. */
export function openHit(app, ws, hit) {
  // a history entry of its own (back returns to the hits); the event is scrolled to once shown
  if (app.current?.id !== hit.session || app.active !== ws) app.show(hit.session, ws);
  if (app.current?.id === hit.session) revealSeq(app.current, hit.seq);
}

export function mount(app, el) {
  const input = h('input', {
    id: 'search-input', type: 'search', placeholder: 'Search all sessions', spellcheck: 'false',
    autocapitalize: 'off', 'aria-label': 'Search all sessions on every workstation',
  });
  const status = h('p', { id: 'search-status', class: 'muted small', role: 'status', 'aria-live': 'polite' });
  const list = h('ul', { id: 'search-hits', class: 'search-hits' });
  const form = h('form', { id: 'search-form', class: 'search-form', role: 'search', autocomplete: 'off' },
    input, h('button', { type: 'submit', class: 'small-btn' }, 'Search'));
  clear(el).append(form, status, list); // under the Search view's heading
  let asked = 0;
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const query = input.value.trim();
    clear(list);
    if (!query) { status.textContent = ''; return; }
    const mine = ++asked;
    status.textContent = 'Searching…';
    const { answers, away } = await searchAll(app.stations.values(), query);
    if (mine !== asked) return; // a newer search replaced this one
    const merged = mergeHits(answers);
    const terms = queryTerms(query);
    const several = app.stations.size > 1;
    list.append(...merged.map(({ ws, hit }) => h('li', { class: 'search-hit-item' },
      h('button', {
        type: 'button', class: 'search-hit-btn', dataset: { session: hit.session, seq: hit.seq, ws: ws.id },
        onclick: () => openHit(app, ws, hit),
      },
      h('span', { class: 'search-hit-head' },
        h('strong', {}, hit.title || hit.session.slice(0, 8)),
        h('span', { class: 'muted small' },
          [several ? ws.name : null, hit.agent, relativeTime(hit.ts)].filter(Boolean).join(' · '))),
      h('span', { class: 'search-snippet small' }, highlighted(hit.snippet, terms))))));
    const said = [`${merged.length} ${merged.length === 1 ? 'match' : 'matches'}`];
    for (const { ws, why } of away) said.push(`${ws.name}: ${why}`);
    status.textContent = said.join(' · ');
  });
}
