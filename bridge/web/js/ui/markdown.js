// A small, safe Markdown renderer for agent text.
//
// It builds DOM nodes directly (see dom.js): text always becomes text nodes, so no input can
// produce an element this file does not create on purpose. Links are kept only for absolute
// http(s) and mailto URLs and open in a new tab without a referrer; images are shown as links
// (remote images would leak the reader's address, and the page's CSP forbids them anyway).
//
// Supported: paragraphs (a newline is a line break, as in chat), # headings, **strong**,
// *em*, ~~strike~~, `code`, fenced code blocks, > quotes, - and 1. lists (nested, task
// boxes), | tables |, --- rules, [links](https://…), <https://…> and bare URLs, \ escapes.
// A streaming message is rendered by a MarkdownStream: the top-level blocks that more text can
// no longer change are rendered once and kept, and only the open block is rendered again as
// deltas arrive, so an unclosed fence or emphasis renders as what it is so far and the cost of
// a delta does not grow with the message. Its output is renderMarkdown's on the whole text
// (tests/web/markdown_stream.test.mjs checks that over many ways of cutting the text).

import { clear, h } from './dom.js';

const MAX_SOURCE = 200_000;
const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';

const FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^([ \t]*)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|$)/;
const TABLE_SEP = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const WORD = /[\p{L}\p{N}]/u;

/** Markdown source -> DocumentFragment. */
export function renderMarkdown(source) {
  const frag = document.createDocumentFragment();
  if (source.length > MAX_SOURCE) {
    frag.append(h('pre', { class: 'md-plain' }, source));
    return frag;
  }
  renderBlocks(source.replace(/\r\n?/g, '\n').split('\n'), frag);
  return frag;
}

/** `text` cut into lines as renderMarkdown cuts it, with where each line starts in `text`. */
function linesOf(text) {
  const lines = [];
  const starts = [];
  const end = /\r\n|\r|\n/g;
  let at = 0;
  for (let m = end.exec(text); m; m = end.exec(text)) {
    lines.push(text.slice(at, m.index));
    starts.push(at);
    at = m.index + m[0].length;
  }
  lines.push(text.slice(at));
  starts.push(at);
  return { lines, starts };
}

/**
 * One element's Markdown as its text grows (a streaming message): `update(text)` with the
 * whole text so far leaves the element as `renderMarkdown(text)` would.
 *
 * Why the kept blocks cannot change: the top-level blocks are found left to right, and where
 * one ends depends only on the lines up to the first line of the next (a blank line, a line
 * that starts another block, the next non-blank line after a list). So once a block starts on
 * a complete line (one a newline ends), every block before it is final. Only the text from
 * that line on is rendered again.
 */
export class MarkdownStream {
  constructor(el) {
    this.el = el;
    this.reset();
  }

  reset() {
    clear(this.el);
    this.text = '';
    this.done = 0; // where the text not yet final starts
    this.open = []; // the nodes rendered from it
    this.plain = null;
  }

  update(text) {
    if (text.length < this.text.length || !text.startsWith(this.text)) this.reset();
    this.text = text;
    if (text.length > MAX_SOURCE) {
      // as renderMarkdown: too long to parse, shown as it is
      if (!this.plain) {
        clear(this.el).append(...renderMarkdown(text).childNodes);
        this.plain = this.el.firstChild;
      } else this.plain.textContent = text;
      return;
    }
    const rest = text.slice(this.done);
    const { lines, starts } = linesOf(rest);
    const frag = document.createDocumentFragment();
    const blocks = [];
    renderBlocks(lines, frag, blocks);
    // the last block that starts on a complete line: the ones before it are final
    let cut = 0;
    for (let k = blocks.length - 1; k > 0; k--) {
      if (blocks[k].line < lines.length - 1) {
        cut = k;
        break;
      }
    }
    for (const node of this.open) node.remove();
    const nodes = [...frag.childNodes];
    const keep = cut ? blocks[cut].node : 0;
    this.open = nodes.slice(keep);
    this.el.append(frag);
    if (cut) this.done += starts[blocks[cut].line];
  }
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || ITEM.test(line);
}

/** `lines` as blocks appended to `parent`; `blocks`, when given, gets each top-level block's
 *  first line and the index of its first node in `parent` (MarkdownStream). */
function renderBlocks(lines, parent, blocks = null) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (line.trim() && blocks) blocks.push({ line: i, node: parent.childNodes.length });
    if (!line.trim()) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      i = renderFence(lines, i, m, parent);
    } else if ((m = HEADING.exec(line))) {
      parent.append(renderInline(m[2] || '', h(`h${m[1].length}`)));
      i++;
    } else if (RULE.test(line)) {
      parent.append(h('hr'));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim()) {
        const q = QUOTE.exec(lines[i]);
        if (!q && startsBlock(lines[i])) break;
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      const quote = h('blockquote');
      renderBlocks(body, quote);
      parent.append(quote);
    } else if (ITEM.test(line)) {
      i = renderList(lines, i, parent);
    } else if (line.includes('|') && i + 1 < lines.length && lines[i + 1].includes('|')
               && lines[i + 1].includes('-') && TABLE_SEP.test(lines[i + 1])) {
      i = renderTable(lines, i, parent);
    } else {
      const para = [line.trim()];
      i++;
      while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) {
        para.push(lines[i].trim());
        i++;
      }
      parent.append(renderInline(para.join('\n'), h('p')));
    }
  }
}

function renderFence(lines, i, m, parent) {
  const indent = m[1].length;
  const fence = m[2];
  const lang = m[3];
  const body = [];
  i++;
  while (i < lines.length) {
    const close = lines[i].trim();
    if (close.startsWith(fence[0].repeat(fence.length)) && /^([`~])\1*$/.test(close)) {
      i++;
      break;
    }
    body.push(lines[i].replace(new RegExp(`^ {0,${indent}}`), ''));
    i++;
  }
  const pre = h('pre', { class: 'md-code' }, h('code', {}, body.join('\n')));
  if (lang) pre.dataset.lang = lang;
  parent.append(pre);
  return i;
}

function renderList(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const indent0 = first[1].length;
  const list = h(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) list.setAttribute('start', parseInt(first[2], 10));
  let loose = false;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length < indent0 || m[1].length > indent0 + 1 || /\d/.test(m[2]) !== ordered) {
      break;
    }
    const content = m[3] ?? '';
    const contentIndent = m[1].length + m[2].length + 1;
    const body = [content];
    i++;
    while (i < lines.length) {
      const l = lines[i];
      if (!l.trim()) {
        // A blank line continues the item only if what follows is indented under it.
        let j = i;
        while (j < lines.length && !lines[j].trim()) j++;
        if (j < lines.length && leadingSpaces(lines[j]) > indent0 + 1) {
          loose = true;
          for (; i < j; i++) body.push('');
          continue;
        }
        if (j < lines.length && ITEM.test(lines[j]) && leadingSpaces(lines[j]) <= indent0 + 1) {
          loose = true;
          i = j;
        }
        break;
      }
      const ind = leadingSpaces(l);
      if (ind > indent0 + 1) {
        body.push(l.slice(Math.min(ind, contentIndent)));
        i++;
      } else if (ITEM.test(l) || startsBlock(l)) {
        break;
      } else {
        body.push(l.trim()); // lazy continuation of the item's paragraph
        i++;
      }
    }
    const li = h('li');
    const task = /^\[([ xX])\][ \t]+/.exec(body[0]);
    if (task) {
      body[0] = body[0].slice(task[0].length);
      li.className = 'md-task';
      li.append(h('span', { class: 'md-box', 'aria-hidden': 'true' }, task[1] === ' ' ? '☐ ' : '☑ '));
    }
    renderBlocks(body, li);
    list.append(li);
  }
  if (!loose) {
    for (const p of list.querySelectorAll(':scope > li > p')) p.replaceWith(...p.childNodes);
  }
  parent.append(list);
  return i;
}

function leadingSpaces(line) {
  return line.length - line.trimStart().length;
}

function splitRow(row) {
  let s = row.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((cell) => cell.trim().replaceAll('\\|', '|'));
}

function renderTable(lines, i, parent) {
  const head = splitRow(lines[i]);
  const aligns = splitRow(lines[i + 1]).map((c) => {
    if (c.startsWith(':') && c.endsWith(':')) return 'align-center';
    if (c.endsWith(':')) return 'align-right';
    return null;
  });
  i += 2;
  const cell = (tag, text, col) => renderInline(text, h(tag, { class: aligns[col] }));
  const thead = h('thead', {}, h('tr', {}, head.map((c, col) => cell('th', c, col))));
  const tbody = h('tbody');
  while (i < lines.length && lines[i].trim() && lines[i].includes('|')) {
    const cells = splitRow(lines[i]);
    tbody.append(h('tr', {}, head.map((_, col) => cell('td', cells[col] ?? '', col))));
    i++;
  }
  parent.append(h('div', { class: 'md-table-wrap' }, h('table', { class: 'md-table' }, thead, tbody)));
  return i;
}

// ---- inline --------------------------------------------------------------------------------

function runLength(text, i, ch) {
  let j = i;
  while (text[j] === ch) j++;
  return j - i;
}

const LINKABLE = /^(?:https?:\/\/|mailto:)/i;

/** The URL a link may go to (absolute http(s) or mailto), else null: a relative link, or any
 *  other scheme, is shown as text. Checked before `new URL`, which throws for every relative
 *  link (an exception per link per render was most of a link-heavy message's cost). */
export function safeHref(url) {
  if (!LINKABLE.test(url)) return null;
  try {
    const u = new URL(url);
    if (u.protocol === 'http:' || u.protocol === 'https:' || u.protocol === 'mailto:') return u.href;
  } catch {
    // "https://" with no host, a bad port: shown as text
  }
  return null;
}

function makeLink(label, url, isImage, opts) {
  const href = safeHref(url);
  const content = (el) => {
    if (label === null) el.append(url);
    else if (isImage) el.append(`image: ${label || url}`);
    else renderInline(label, el, { ...opts, links: false });
    return el;
  };
  if (!href) return content(h('span', { class: 'md-badlink', title: url }));
  return content(h('a', { href, target: '_blank', rel: 'noopener noreferrer nofollow' }));
}

function parseLink(text, i) {
  let depth = 0;
  let j = i;
  for (; j < text.length; j++) {
    const ch = text[j];
    if (ch === '\\') j++;
    else if (ch === '[') depth++;
    else if (ch === ']' && --depth === 0) break;
  }
  if (j >= text.length || text[j + 1] !== '(') return null;
  let k = j + 2;
  let parens = 1;
  for (; k < text.length; k++) {
    const ch = text[k];
    if (ch === '\\') k++;
    else if (ch === '\n') return null;
    else if (ch === '(') parens++;
    else if (ch === ')' && --parens === 0) break;
  }
  if (k >= text.length) return null;
  let url = text.slice(j + 2, k).trim();
  const titled = /^(\S+)[ \t]+(?:"[^"]*"|'[^']*')$/.exec(url);
  if (titled) url = titled[1];
  if (url.startsWith('<') && url.endsWith('>')) url = url.slice(1, -1);
  return { label: text.slice(i + 1, j), url, end: k + 1 };
}

function parseEmphasis(text, i, opts) {
  const ch = text[i];
  const run = runLength(text, i, ch);
  if (ch === '~' ? run !== 2 : run > 3) return null;
  const next = text[i + run];
  if (!next || /\s/.test(next)) return null;
  if (ch === '_' && i > 0 && WORD.test(text[i - 1])) return null; // snake_case stays as is
  let k = text.indexOf(ch.repeat(run), i + run);
  while (k >= 0) {
    const closerRun = runLength(text, k, ch);
    const after = text[k + closerRun];
    const ok = closerRun === run && !/\s/.test(text[k - 1])
      && !(ch === '_' && after && WORD.test(after));
    if (ok) break;
    k = text.indexOf(ch.repeat(run), k + closerRun);
  }
  if (k < 0) return null;
  const inner = text.slice(i + run, k);
  let node;
  let target;
  if (ch === '~') {
    node = target = h('del');
  } else if (run === 1) {
    node = target = h('em');
  } else if (run === 2) {
    node = target = h('strong');
  } else {
    target = h('em');
    node = h('strong', {}, target);
  }
  renderInline(inner, target, opts);
  return { node, end: k + run };
}

/** Inline Markdown -> child nodes of `parent` (returned). */
export function renderInline(text, parent, opts = { links: true }) {
  let buf = '';
  const flush = () => {
    if (buf) parent.append(buf);
    buf = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '\\' && i + 1 < text.length && (text[i + 1] === '\n' || PUNCT.includes(text[i + 1]))) {
      if (text[i + 1] === '\n') {
        flush();
        parent.append(h('br'));
      } else {
        buf += text[i + 1];
      }
      i += 2;
      continue;
    }
    if (c === '\n') {
      flush();
      parent.append(h('br'));
      i++;
      continue;
    }
    if (c === '`') {
      const run = runLength(text, i, '`');
      let close = text.indexOf('`'.repeat(run), i + run);
      while (close >= 0 && runLength(text, close, '`') !== run) {
        close = text.indexOf('`'.repeat(run), close + runLength(text, close, '`'));
      }
      if (close >= 0) {
        flush();
        let code = text.slice(i + run, close).replaceAll('\n', ' ');
        if (code.length > 2 && code.startsWith(' ') && code.endsWith(' ') && code.trim()) {
          code = code.slice(1, -1);
        }
        parent.append(h('code', {}, code));
        i = close + run;
      } else {
        buf += '`'.repeat(run);
        i += run;
      }
      continue;
    }
    if (opts.links !== false && (c === '[' || (c === '!' && text[i + 1] === '['))) {
      const link = parseLink(text, c === '!' ? i + 1 : i);
      if (link) {
        flush();
        parent.append(makeLink(link.label, link.url, c === '!', opts));
        i = link.end;
        continue;
      }
    }
    if (opts.links !== false && c === '<') {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(text.slice(i, i + 2048));
      if (m) {
        flush();
        parent.append(makeLink(null, m[1], false, opts));
        i += m[0].length;
        continue;
      }
    }
    if (opts.links !== false && c === 'h' && (i === 0 || /[\s(]/.test(text[i - 1]))) {
      const m = /^https?:\/\/[^\s<>"]+/.exec(text.slice(i, i + 2048));
      if (m) {
        let url = m[0].replace(/[.,;:!?'"*_]+$/, '');
        while (url.endsWith(')') && url.split('(').length < url.split(')').length) {
          url = url.slice(0, -1);
        }
        flush();
        parent.append(makeLink(null, url, false, opts));
        i += url.length;
        continue;
      }
    }
    if (c === '*' || c === '_' || c === '~') {
      const emph = parseEmphasis(text, i, opts);
      if (emph) {
        flush();
        parent.append(emph.node);
        i = emph.end;
      } else {
        const run = runLength(text, i, c);
        buf += c.repeat(run);
        i += run;
      }
      continue;
    }
    buf += c;
    i++;
  }
  flush();
  return parent;
}
