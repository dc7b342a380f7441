// ui/markdown.js's MarkdownStream against renderMarkdown on the whole text: after every delta,
// over many ways of cutting sample Markdown into deltas (one character at a time, line by
// line, random sizes, a cut inside each CRLF), the streamed element holds exactly what the
// whole rendering makes. And what it renders again per delta is the open block only; and
// safeHref does not throw for a relative link. node --test, run by tests/test_web_markdown.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { install } from './minidom.mjs';

install();
const { MarkdownStream, renderMarkdown, safeHref } = await import('../../bridge/web/js/ui/markdown.js');

const SAMPLE = `# Plan for the *refactor*

First a paragraph with **strong**, *em*, ~~gone~~, \`code\` and a [link](https://example.com/a).
A second line of it, a bare https://example.com/b. and <https://example.com/c>, a
[relative link](docs/x.md) and an escaped \\*star\\*.

## Steps
1. Read the \`app.js\`
2. Split it:
   - net/
   - ui/

     with a loose paragraph under it
3. Test it

- [ ] a task
- [x] a done task
* another list type

3) starts at three
4) and four

> a quote with **bold**
> - and a list
lazy continuation

| Module | Lines |
|:--|--:|
| app.js | 1300 |
| views/ | \\| 600 |

---
\`\`\`js
const a = 1;

const b = \`x\`;
\`\`\`
~~~
tilde fence
~~~~

Paragraph then a heading
### right after
Text *unclosed emphasis and \`unclosed code
***
- a list
  continued lazily

after the list
    indented code-looking text
![an image](https://example.com/i.png) _snake_case_word_ and __under__

\`\`\`python
unclosed = "fence at the end"
`;

/** A small seeded generator: the same cuts on every run. */
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function whole(text) {
  const el = document.createElement('div');
  el.append(renderMarkdown(text));
  return el.serialize();
}

/** Stream `text` in `cuts` (ascending offsets); compare with the whole rendering each time. */
function streamed(text, cuts, label) {
  const el = document.createElement('div');
  const stream = new MarkdownStream(el);
  let at = 0;
  for (const cut of [...cuts, text.length]) {
    if (cut <= at) continue;
    const so_far = text.slice(0, cut);
    stream.update(so_far);
    assert.equal(el.serialize(), whole(so_far), `${label}: differs after ${cut} characters`);
    at = cut;
  }
  return stream;
}

test('one character at a time: the same as the whole text, after every delta', () => {
  const cuts = Array.from({ length: SAMPLE.length }, (_, i) => i + 1);
  streamed(SAMPLE, cuts, 'by character');
});

test('line by line, and with CRLF line ends cut between the CR and the LF', () => {
  const lines = [];
  for (let i = SAMPLE.indexOf('\n'); i >= 0; i = SAMPLE.indexOf('\n', i + 1)) lines.push(i + 1);
  streamed(SAMPLE, lines, 'by line');
  const crlf = SAMPLE.replaceAll('\n', '\r\n');
  const mid = [];
  for (let i = crlf.indexOf('\r'); i >= 0; i = crlf.indexOf('\r', i + 1)) mid.push(i + 1);
  streamed(crlf, mid, 'CR|LF');
  const cr = SAMPLE.replaceAll('\n', '\r');
  streamed(cr, Array.from({ length: cr.length }, (_, i) => i + 1), 'CR alone');
});

test('200 random chunkings of the sample, and of the sample three times over', () => {
  const next = rng(46);
  for (const text of [SAMPLE, SAMPLE.repeat(3)]) {
    for (let run = 0; run < 100; run++) {
      const cuts = [];
      const most = 1 + Math.floor(next() * 40);
      for (let at = 0; at < text.length;) {
        at += 1 + Math.floor(next() * most);
        cuts.push(Math.min(at, text.length));
      }
      streamed(text, cuts, `random run ${run}`);
    }
  }
});

test('a text that is not the last one grown (a replaced message) is rendered from scratch', () => {
  const el = document.createElement('div');
  const stream = new MarkdownStream(el);
  stream.update('# one\n\ntwo\n\nthree');
  stream.update('# other\n\nfour');
  assert.equal(el.serialize(), whole('# other\n\nfour'));
});

test('past the longest text parsed it becomes plain text, as the whole rendering does', () => {
  const long = `${'word '.repeat(20)}\n\n`.repeat(2100); // ~212k characters
  const cuts = [];
  for (let at = 150_000; at < long.length; at += 9_000) cuts.push(at);
  streamed(long, [1000, 50_000, ...cuts], 'long');
});

test('each delta renders again only the open block, not the message', () => {
  const el = document.createElement('div');
  const stream = new MarkdownStream(el);
  const paragraphs = Array.from({ length: 400 }, (_, i) => `Paragraph ${i} with *some* text.\n\n`);
  let text = '';
  let mostOpen = 0;
  for (const p of paragraphs) {
    for (const piece of [p.slice(0, 10), p.slice(10)]) {
      text += piece;
      stream.update(text);
      mostOpen = Math.max(mostOpen, text.length - stream.done);
    }
  }
  assert.ok(text.length > 12_000);
  // what is rendered again is at most the last paragraph or two, however long the message
  assert.ok(mostOpen < 2 * paragraphs[399].length + 2, `rendered again: ${mostOpen} characters`);
  assert.equal(el.serialize(), whole(text));
});

test('safeHref: absolute http(s) and mailto links only, and no exception for a relative one', () => {
  const Real = globalThis.URL;
  let thrown = 0;
  globalThis.URL = class extends Real {
    constructor(...args) {
      try {
        super(...args);
      } catch (err) {
        thrown++;
        throw err;
      }
    }
  };
  try {
    assert.equal(safeHref('docs/web-client.md'), null);
    assert.equal(safeHref('./a.md#b'), null);
    assert.equal(safeHref('/etc/passwd'), null);
    assert.equal(safeHref('#section'), null);
    assert.equal(safeHref('javascript:alert(1)'), null);
    assert.equal(safeHref('data:text/html,x'), null);
    assert.equal(thrown, 0, 'new URL threw for a relative link');
    assert.equal(safeHref('https://example.com/a b'), 'https://example.com/a%20b');
    assert.equal(safeHref('HTTP://Example.com'), 'http://example.com/');
    assert.equal(safeHref('mailto:a@example.com'), 'mailto:a@example.com');
    assert.equal(safeHref('https://'), null); // no host: text
  } finally {
    globalThis.URL = Real;
  }
  // a relative link in Markdown is shown as its text, marked, with no link
  const el = document.createElement('div');
  el.append(renderMarkdown('see [the docs](docs/x.md)'));
  assert.equal(el.serialize(), '<div><p>"see "<span class="md-badlink" title="docs/x.md">"the docs"</span></p></div>');
});
