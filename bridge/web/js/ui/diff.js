// Diff blocks: parse the unified text when the agent gave one, otherwise compute a line diff of
// old_text -> new_text; render it unified (one column) or side by side (two columns).

import { h } from './dom.js';

const CONTEXT = 3;
const MAX_CELLS = 4_000_000; // above this the LCS table is too big: show all-removed/all-added

/**
 * @typedef {{kind: 'ctx'|'del'|'add', text: string, old: number|null, new: number|null}} Line
 * @typedef {{header: string, lines: Line[]}} Hunk
 */

/** Unified diff text -> hunks. File headers (---/+++/diff/index) are skipped. */
export function parseUnified(text) {
  const hunks = [];
  let hunk = null;
  let oldNo = 0;
  let newNo = 0;
  for (const raw of text.replace(/\n$/, '').split('\n')) {
    const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/.exec(raw);
    if (m) {
      hunk = { header: raw, lines: [] };
      hunks.push(hunk);
      oldNo = parseInt(m[1], 10);
      newNo = parseInt(m[2], 10);
      continue;
    }
    if (!hunk) continue;
    if (raw.startsWith('\\')) continue; // "\ No newline at end of file"
    const tag = raw[0];
    const body = raw.slice(1);
    if (tag === '+') hunk.lines.push({ kind: 'add', text: body, old: null, new: newNo++ });
    else if (tag === '-') hunk.lines.push({ kind: 'del', text: body, old: oldNo++, new: null });
    else hunk.lines.push({ kind: 'ctx', text: body, old: oldNo++, new: newNo++ });
  }
  return hunks;
}

function splitLines(text) {
  if (!text) return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** old/new text -> hunks with CONTEXT lines around each change (LCS on lines). */
export function diffTexts(oldText, newText) {
  const a = splitLines(oldText ?? '');
  const b = splitLines(newText ?? '');
  const ops = [];
  if (a.length * b.length > MAX_CELLS) {
    a.forEach((text) => ops.push({ kind: 'del', text }));
    b.forEach((text) => ops.push({ kind: 'add', text }));
  } else {
    // lcs[i][j] = length of the LCS of a[i:] and b[j:], in one flat array.
    const w = b.length + 1;
    const lcs = new Uint32Array((a.length + 1) * w);
    for (let i = a.length - 1; i >= 0; i--) {
      for (let j = b.length - 1; j >= 0; j--) {
        lcs[i * w + j] = a[i] === b[j]
          ? lcs[(i + 1) * w + j + 1] + 1
          : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) {
        ops.push({ kind: 'ctx', text: a[i++] });
        j++;
      } else if (i < a.length && (j >= b.length || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) {
        ops.push({ kind: 'del', text: a[i++] }); // removals before additions, as diff(1) does
      } else {
        ops.push({ kind: 'add', text: b[j++] });
      }
    }
  }
  let oldNo = 1;
  let newNo = 1;
  const numbered = ops.map((op) => ({
    ...op,
    old: op.kind === 'add' ? null : oldNo++,
    new: op.kind === 'del' ? null : newNo++,
  }));
  // Keep CONTEXT unchanged lines around each change; cut the rest into separate hunks.
  const keep = numbered.map(() => false);
  numbered.forEach((line, idx) => {
    if (line.kind === 'ctx') return;
    for (let k = Math.max(0, idx - CONTEXT); k <= Math.min(numbered.length - 1, idx + CONTEXT); k++) {
      keep[k] = true;
    }
  });
  const hunks = [];
  let hunk = null;
  numbered.forEach((line, idx) => {
    if (!keep[idx]) {
      hunk = null;
      return;
    }
    if (!hunk) {
      hunk = { header: '', lines: [] };
      hunks.push(hunk);
    }
    hunk.lines.push(line);
  });
  for (const hk of hunks) {
    const first = hk.lines[0];
    const oldStart = hk.lines.find((l) => l.old !== null)?.old ?? Math.max(0, (first.new ?? 1) - 1);
    const newStart = hk.lines.find((l) => l.new !== null)?.new ?? 0;
    const oldCount = hk.lines.filter((l) => l.kind !== 'add').length;
    const newCount = hk.lines.filter((l) => l.kind !== 'del').length;
    hk.header = `@@ -${oldCount ? oldStart : 0},${oldCount} +${newCount ? newStart : 0},${newCount} @@`;
  }
  return hunks;
}

export function hunksOf(block) {
  if (block.unified) {
    const parsed = parseUnified(block.unified);
    if (parsed.length) return parsed;
  }
  return diffTexts(block.old_text, block.new_text);
}

export function diffStats(hunks) {
  let added = 0;
  let removed = 0;
  for (const hk of hunks) {
    for (const l of hk.lines) {
      if (l.kind === 'add') added++;
      else if (l.kind === 'del') removed++;
    }
  }
  return { added, removed };
}

const num = (n) => h('td', { class: 'ln' }, n === null ? '' : String(n));
const SIGN = { add: '+', del: '-', ctx: ' ' };

export function renderUnified(hunks) {
  const tbody = h('tbody');
  for (const hk of hunks) {
    tbody.append(h('tr', { class: 'hunk' }, h('td', { colspan: 3 }, hk.header)));
    for (const l of hk.lines) {
      tbody.append(h('tr', { class: l.kind }, num(l.old), num(l.new),
        h('td', { class: 'code' }, h('span', { class: 'sign' }, SIGN[l.kind]), l.text)));
    }
  }
  return h('table', { class: 'diff unified' }, tbody);
}

export function renderSplit(hunks) {
  const tbody = h('tbody');
  const side = (l, kind) => l
    ? [num(kind === 'left' ? l.old : l.new), h('td', { class: `code ${l.kind}` }, l.text)]
    : [h('td', { class: 'ln empty' }), h('td', { class: 'code empty' })];
  for (const hk of hunks) {
    tbody.append(h('tr', { class: 'hunk' }, h('td', { colspan: 4 }, hk.header)));
    const lines = hk.lines;
    let i = 0;
    while (i < lines.length) {
      if (lines[i].kind === 'ctx') {
        tbody.append(h('tr', {}, side(lines[i], 'left'), side(lines[i], 'right')));
        i++;
        continue;
      }
      // Pair a run of deletions with the run of additions after it, row by row.
      const dels = [];
      const adds = [];
      while (i < lines.length && lines[i].kind === 'del') dels.push(lines[i++]);
      while (i < lines.length && lines[i].kind === 'add') adds.push(lines[i++]);
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
        tbody.append(h('tr', {}, side(dels[k], 'left'), side(adds[k], 'right')));
      }
    }
  }
  return h('table', { class: 'diff split' }, tbody);
}
