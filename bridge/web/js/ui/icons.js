// Small line icons as inline SVG built with DOM calls (emoji fonts are not everywhere, and
// the CSP forbids icon fonts from elsewhere). Each is a 24x24 outline; paths are constants.

const NS = 'http://www.w3.org/2000/svg';

const PATHS = {
  attach: 'M20 11.5l-8.1 8.1a5 5 0 0 1-7.1-7.1l8.5-8.5a3.3 3.3 0 0 1 4.7 4.7l-8.5 8.5a1.7 1.7 0 0 1-2.4-2.4l7.8-7.8',
  lock: 'M6 11h12v9H6zM8.5 11V8a3.5 3.5 0 0 1 7 0v3',
  terminal: 'M3 5h18v14H3zM7 10l3 2.5L7 15M12.5 15H17',
  stop: 'M7 7h10v10H7z',
  execute: 'M4 5h16v14H4zM8 10l2.5 2L8 14M12 14h4',
  edit: 'M4 20h4L19 9l-4-4L4 16zM13.5 6.5l4 4',
  read: 'M6 3h8l4 4v14H6zM14 3v4h4M9 12h6M9 16h6',
  search: 'M10.5 4a6.5 6.5 0 1 1 0 13a6.5 6.5 0 0 1 0-13zM15.5 15.5L20 20',
  fetch: 'M12 3a9 9 0 1 1 0 18a9 9 0 0 1 0-18zM3 12h18M12 3c3 3 3 15 0 18M12 3c-3 3-3 15 0 18',
  think: 'M5 5h14v10H10l-4 4v-4H5z',
  delete: 'M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13',
  move: 'M4 12h14M14 7l5 5-5 5',
  tool: 'M14.5 4a4.5 4.5 0 0 0-4.2 6.1L4 16.4 7.6 20l6.3-6.3A4.5 4.5 0 0 0 20 9.5l-2.8 2.8-3.5-3.5L16.5 6a4.5 4.5 0 0 0-2-2z',
  back: 'M19 12H5M11 6l-6 6 6 6',
  file: 'M6 3h8l4 4v14H6zM14 3v4h4',
  sum: 'M17 5H7l6 7-6 7h10',
  warn: 'M12 3l10 18H2zM12 10v5M12 17.5v.5',
  usage: 'M4 20h16M7 20v-6M12 20V8M17 20v-10',
  settings: 'M12 8.5a3.5 3.5 0 1 1 0 7a3.5 3.5 0 0 1 0-7zM12 2v3.5M12 18.5V22M2 12h3.5M18.5 12H22M4.9 4.9l2.5 2.5M16.6 16.6l2.5 2.5M4.9 19.1l2.5-2.5M16.6 7.4l2.5-2.5',
};

export function icon(name, label = null) {
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('class', `icon icon-${name}`);
  if (label) {
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', label);
  } else {
    svg.setAttribute('aria-hidden', 'true');
  }
  const path = document.createElementNS(NS, 'path');
  path.setAttribute('d', PATHS[name] || PATHS.tool);
  svg.append(path);
  return svg;
}

export function hasIcon(name) {
  return Object.hasOwn(PATHS, name);
}
