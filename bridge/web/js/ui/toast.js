// A short message over the page, gone after a few seconds or a tap: what failed, or what
// happened where the person is not looking.

import { $, codeSpans, h } from './dom.js';

export function toast(message, level = 'error') {
  let stack = $('#toasts');
  if (!stack) {
    stack = h('div', { id: 'toasts', class: 'toasts', role: 'alert' });
    document.body.append(stack);
  }
  const el = h('div', { class: `toast ${level}`, onclick: () => el.remove() }, codeSpans(message));
  stack.append(el);
  setTimeout(() => el.remove(), 6000);
}
