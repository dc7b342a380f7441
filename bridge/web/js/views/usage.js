// What the agents cost and how close each is to its limits, over every workstation:
// `usage.summary` per day and per agent (summed across workstations), drawn as inline SVG;
// totals for today, 7 and 30 days (UTC days, as the daemon groups them); and each agent's
// latest `limits` from `agents.list` as a bar with its reset time. Agents that report no
// limits show none.
//
// mount(app, el) fills `el`; it needs of `app` only `stations` (workstations with `name`,
// `client`).

import { appendAll, clear, formatCost, formatCount, h } from '../ui/dom.js';

const SVG = 'http://www.w3.org/2000/svg';
const DAYS = 30;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : String(c));
  return el;
}

/** The UTC day `n` days before `now`, as the daemon's `YYYY-MM-DD`. */
export function dayKey(now, n = 0) {
  return new Date(now - n * 86400000).toISOString().slice(0, 10);
}

/** Rows of several workstations, summed per key. */
export function sumRows(lists) {
  const by = new Map();
  for (const rows of lists) {
    for (const r of rows) {
      const t = by.get(r.key) || { key: r.key, turns: 0, input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, cost_usd: 0 };
      t.turns += r.turns;
      t.input_tokens += r.input_tokens;
      t.output_tokens += r.output_tokens;
      t.cached_input_tokens += r.cached_input_tokens;
      t.cost_usd += r.cost_usd;
      by.set(r.key, t);
    }
  }
  return [...by.values()];
}

/** Totals of the day rows for today, the last 7 and the last 30 days (today included). */
export function totals(dayRows, now = Date.now()) {
  const spans = { today: 1, '7 days': 7, '30 days': 30 };
  const out = {};
  for (const [name, n] of Object.entries(spans)) {
    const first = dayKey(now, n - 1);
    const rows = dayRows.filter((r) => r.key >= first);
    out[name] = {
      cost: rows.reduce((s, r) => s + r.cost_usd, 0),
      tokens: rows.reduce((s, r) => s + r.input_tokens + r.output_tokens, 0),
      turns: rows.reduce((s, r) => s + r.turns, 0),
    };
  }
  return out;
}

/** What a row is measured by: dollars when any row has a cost, else tokens. */
function measure(rows) {
  const byCost = rows.some((r) => r.cost_usd > 0);
  return {
    value: (r) => (byCost ? r.cost_usd : r.input_tokens + r.output_tokens),
    label: (v) => (byCost ? formatCost(v) : `${formatCount(v)} tokens`),
  };
}

/** Columns for the last 30 days, a bar each (its title says the day and the amount). */
export function dayChart(dayRows, now = Date.now()) {
  const byDay = new Map(dayRows.map((r) => [r.key, r]));
  const days = Array.from({ length: DAYS }, (_, i) => dayKey(now, DAYS - 1 - i));
  const m = measure(dayRows);
  const values = days.map((d) => (byDay.has(d) ? m.value(byDay.get(d)) : 0));
  const top = Math.max(...values, 0) || 1;
  const width = 300;
  const height = 120;
  const step = width / DAYS;
  const chart = svg('svg', {
    viewBox: `0 0 ${width} ${height + 16}`, class: 'usage-chart', role: 'img',
    'aria-label': `Spend per day, last ${DAYS} days`,
  });
  values.forEach((v, i) => {
    const hgt = Math.max(v > 0 ? 2 : 0, (v / top) * height);
    const bar = svg('rect', { x: (i * step + 1).toFixed(1), y: (height - hgt).toFixed(1), width: (step - 2).toFixed(1), height: hgt.toFixed(1), class: 'usage-bar' },
      svg('title', {}, `${days[i]}: ${m.label(v)}`));
    chart.append(bar);
  });
  chart.append(svg('text', { x: 0, y: height + 13, class: 'usage-axis' }, days[0].slice(5)));
  chart.append(svg('text', { x: width, y: height + 13, class: 'usage-axis', 'text-anchor': 'end' }, 'today'));
  chart.append(svg('text', { x: 2, y: 10, class: 'usage-axis' }, m.label(Math.max(...values, 0))));
  return chart;
}

/** A horizontal bar per agent, largest first. */
export function agentChart(agentRows) {
  const m = measure(agentRows);
  const rows = [...agentRows].sort((a, b) => m.value(b) - m.value(a));
  const top = Math.max(...rows.map(m.value), 0) || 1;
  const line = 22;
  const width = 300;
  const chart = svg('svg', {
    viewBox: `0 0 ${width} ${Math.max(1, rows.length) * line}`, class: 'usage-chart', role: 'img',
    'aria-label': 'Spend per agent',
  });
  rows.forEach((r, i) => {
    const w = Math.max(2, (m.value(r) / top) * (width - 180)); // 80 px left for the amount
    chart.append(svg('text', { x: 0, y: i * line + 15, class: 'usage-label' }, r.key.slice(0, 14)));
    chart.append(svg('rect', { x: 100, y: i * line + 4, width: w.toFixed(1), height: 14, class: 'usage-bar' }));
    chart.append(svg('text', { x: 104 + w, y: i * line + 15, class: 'usage-label' }, m.label(m.value(r))));
  });
  return chart;
}

function limitBar(agentName, limit, wsName) {
  const pct = limit.used_pct;
  const resets = limit.resets_at ? new Date(limit.resets_at) : null;
  const when = resets ? `resets ${resets.toLocaleString([], { weekday: 'short', hour: '2-digit', minute: '2-digit' })}` : '';
  const fill = h('div', { class: `limit-fill${limit.reached ? ' reached' : pct >= 80 ? ' high' : ''}` });
  fill.style.width = `${Math.min(100, pct ?? 0)}%`; // CSSOM: the page's CSP has no inline styles
  const meter = h('div', { class: 'limit-meter', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': pct ?? '', 'aria-label': `${agentName} ${limit.window} limit` }, fill);
  return h('li', { class: 'limit-item' },
    h('div', { class: 'limit-head small' },
      h('strong', {}, `${agentName} · ${limit.window}`),
      h('span', {}, [pct === null || pct === undefined ? '' : `${pct}%`, limit.reached ? 'reached' : null].filter(Boolean).join(' '))),
    meter,
    h('div', { class: 'muted small' }, [when, wsName].filter(Boolean).join(' · ')));
}

async function ask(stations, fields) {
  const lists = [];
  const away = [];
  await Promise.all([...stations].map(async (ws) => {
    if (!ws.client?.isOpen) { away.push(ws.name); return; }
    try {
      lists.push({ ws, ...(await ws.client.request(fields.t, fields.body)) });
    } catch {
      away.push(ws.name);
    }
  }));
  return { lists, away };
}

export async function render(app, body) {
  const stations = [...app.stations.values()];
  const since = `${dayKey(Date.now(), DAYS - 1)}T00:00:00Z`;
  const [days, agents, listed] = await Promise.all([
    ask(stations, { t: 'usage.summary', body: { group_by: 'day', since } }),
    ask(stations, { t: 'usage.summary', body: { group_by: 'agent', since } }),
    ask(stations, { t: 'agents.list', body: {} }),
  ]);
  const dayRows = sumRows(days.lists.map((l) => l.rows));
  const agentRows = sumRows(agents.lists.map((l) => l.rows));
  const sums = totals(dayRows);
  const several = stations.length > 1;
  const limits = [];
  for (const { ws, agents: list } of listed.lists) {
    for (const a of list || []) for (const limit of a.limits || []) limits.push(limitBar(a.display_name, limit, several ? ws.name : ''));
  }
  appendAll(clear(body), [
    h('div', { class: 'usage-totals' }, ...Object.entries(sums).map(([name, t]) => h('div', { class: 'usage-total' },
      h('span', { class: 'muted small' }, name),
      h('strong', {}, formatCost(t.cost)),
      h('span', { class: 'muted small' }, `${formatCount(t.tokens)} tokens · ${t.turns} turns`)))),
    h('h3', { class: 'small' }, 'Per day (UTC), last 30 days'),
    dayChart(dayRows),
    h('h3', { class: 'small' }, 'Per agent, last 30 days'),
    agentRows.length ? agentChart(agentRows) : h('p', { class: 'muted small' }, 'No usage reported yet.'),
    h('h3', { class: 'small' }, 'Limits'),
    limits.length ? h('ul', { class: 'limit-list' }, limits) : h('p', { class: 'muted small' }, 'No agent has reported its limits.'),
    days.away.length ? h('p', { class: 'muted small' }, `Not counted (away): ${[...new Set(days.away)].join(', ')}`) : null,
  ]);
}

export function mount(app, el) {
  const body = h('div', { id: 'usage-body', class: 'usage-body' });
  const refresh = h('button', { type: 'button', id: 'usage-refresh', class: 'small-btn' }, 'Show');
  refresh.addEventListener('click', async () => {
    refresh.disabled = true;
    try {
      await render(app, body);
      refresh.textContent = 'Refresh';
    } finally {
      refresh.disabled = false;
    }
  });
  clear(el).append(h('div', { class: 'usage-actions' }, refresh), body); // under the view's heading
}
