// The address bar's fragment: what the page shows (`#view=…`, `#session=…&ws=…`) and what a
// link hands it once (`#token=…`, `#relay=…`, `#answer=…`).

export function readFragment() {
  return new URLSearchParams(window.location.hash.slice(1));
}

/** The fragment as `params`: a new history entry when `push` (a place the browser's back
 *  returns from), else in place of the current one (a link's secret taken out, a fix-up). */
export function writeFragment(params, push = false) {
  const text = params.toString();
  const url = window.location.pathname + window.location.search + (text ? `#${text}` : '');
  if (url === window.location.pathname + window.location.search + window.location.hash) return;
  if (push) window.history.pushState({ inApp: (window.history.state?.inApp ?? 0) + 1 }, '', url);
  else window.history.replaceState(window.history.state, '', url);
}
