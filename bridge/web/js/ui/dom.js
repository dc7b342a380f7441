// Building DOM nodes without an HTML parser.
//
// Everything the agent (or anyone else) says reaches the page through `textContent` or
// `Node.append(string)`, which create text nodes. Nothing in this client assigns `innerHTML`,
// so `<script>` in agent output is shown as the characters it is.

/**
 * h('div', {class: 'x', onclick: fn, dataset: {id: 1}}, 'text', childNode, [more])
 * Attribute names come from this code, never from data; values are set with setAttribute.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  appendAll(el, children);
  return el;
}

export function appendAll(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
  return parent;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

/**
 * Plain text with its `code spans` as <code> elements, as nodes to append. Error messages and
 * reasons quote names this way (`claude` not found, key `server.port`); only backticks count,
 * the rest stays text.
 */
export function codeSpans(text) {
  const parts = String(text ?? '').split(/`([^`\n]+)`/);
  return parts.map((part, i) => (i % 2 ? h('code', {}, part) : part)).filter((p) => p !== '');
}

/** Quote a word for a POSIX shell, so a shown command can be pasted as is. */
export function shellQuote(word) {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'"'"'`)}'`;
}

/** Copy text; falls back to selecting it where the Clipboard API is unavailable (plain http). */
export async function copyText(text, selectEl) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (selectEl) {
      const range = document.createRange();
      range.selectNodeContents(selectEl);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
    }
    return false;
  }
}

export function formatCount(n) {
  if (n === null || n === undefined) return null;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${Math.round(n / 1e3)}k`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function formatCost(usd) {
  if (usd === null || usd === undefined) return null;
  return usd >= 0.01 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

export function relativeTime(iso) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return '';
  const s = Math.max(0, (Date.now() - then) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(then).toLocaleDateString();
}

/** Random id for client_msg_id; crypto.randomUUID needs a secure context, this does not. */
export function randomId(prefix = 'web') {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return prefix + '-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
