// The web client's module layers (docs/web-client.md, "Modules"), read from the imports of
// every file under bridge/web: net/ (protocol, relay, storage) and ui/ (rendering helpers)
// import nothing above them nor each other; views/ import net/ and ui/; the shell (js/*.js)
// imports anything; the service worker imports net/ only. No cycles, no module over 600 lines.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const WEB = resolve(dirname(fileURLToPath(import.meta.url)), '../../bridge/web');
const MAX_LINES = 600;

/** What each layer may import, by the layer of the imported file. */
const MAY_IMPORT = {
  vendor: ['vendor'],
  net: ['net', 'vendor'],
  ui: ['ui'],
  views: ['views', 'net', 'ui'],
  shell: ['shell', 'views', 'net', 'ui'],
  worker: ['worker', 'net'],
};

export function layerOf(path) {
  const rel = relative(WEB, path);
  if (rel.startsWith('vendor/')) return 'vendor';
  if (!rel.startsWith('js/')) return 'worker'; // sw.js, sw-core.js, sw-classic.js
  const parts = rel.split('/');
  if (parts.length === 2) return 'shell';
  return parts[1];
}

function ourFiles(dir = WEB) {
  const found = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      if (name !== 'vendor') found.push(...ourFiles(path));
    } else if (name.endsWith('.js')) found.push(path);
  }
  return found;
}

/** Every module a file imports (static, side-effect, dynamic, importScripts), as paths. */
export function importsOf(path, text = readFileSync(path, 'utf8')) {
  const specs = [];
  const patterns = [
    /^\s*import\s[^'"]*?from\s*['"]([^'"]+)['"]/gms,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /import\(\s*['"]([^'"]+)['"]\s*\)/g,
    /importScripts\(\s*['"]([^'"]+)['"]\s*\)/g,
    /^\s*export\s[^'"]*?from\s*['"]([^'"]+)['"]/gms,
  ];
  const code = text.replace(/^\s*\/\/.*$/gm, '');
  for (const re of patterns) for (const m of code.matchAll(re)) specs.push(m[1]);
  return [...new Set(specs)].map((s) => (s.startsWith('/') ? join(WEB, s) : resolve(dirname(path), s)));
}

const files = ourFiles();

test('the layers are as the map says: the folders exist and hold modules', () => {
  const layers = new Set(files.map(layerOf));
  for (const layer of ['net', 'ui', 'views', 'shell', 'worker']) assert.ok(layers.has(layer), layer);
  for (const layer of layers) assert.ok(layer in MAY_IMPORT, `a folder outside the map: ${layer}`);
});

test('no import from a lower layer to a higher one', () => {
  const wrong = [];
  for (const file of files) {
    for (const dep of importsOf(file)) {
      if (!MAY_IMPORT[layerOf(file)].includes(layerOf(dep))) {
        wrong.push(`${relative(WEB, file)} -> ${relative(WEB, dep)}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});

test('every import names a file that exists', () => {
  const missing = [];
  for (const file of files) {
    for (const dep of importsOf(file)) {
      try { statSync(dep); } catch { missing.push(`${relative(WEB, file)} -> ${relative(WEB, dep)}`); }
    }
  }
  assert.deepEqual(missing, []);
});

test('no import cycles', () => {
  const graph = new Map(files.map((f) => [f, importsOf(f).filter((d) => !d.includes('/vendor/'))]));
  const state = new Map();
  const cycles = [];
  const visit = (node, path) => {
    if (state.get(node) === 'done') return;
    if (state.get(node) === 'open') {
      cycles.push([...path.slice(path.indexOf(node)), node].map((p) => relative(WEB, p)).join(' -> '));
      return;
    }
    state.set(node, 'open');
    for (const dep of graph.get(node) || []) visit(dep, [...path, node]);
    state.set(node, 'done');
  };
  for (const f of files) visit(f, []);
  assert.deepEqual(cycles, []);
});

test(`no module over ${MAX_LINES} lines`, () => {
  const long = files
    .map((f) => [relative(WEB, f), readFileSync(f, 'utf8').split('\n').length - 1])
    .filter(([, n]) => n > MAX_LINES);
  assert.deepEqual(long, []);
});

test('the checker sees what it must: an upward import, a cycle, a dynamic import', () => {
  const at = (p) => join(WEB, p);
  const up = importsOf(at('js/net/x.js'), "import { SessionView } from '../views/session.js';\n");
  assert.equal(layerOf(up[0]), 'views');
  assert.ok(!MAY_IMPORT.net.includes(layerOf(up[0])));
  const dyn = importsOf(at('js/app.js'), "const m = await import('./net/relay.js');\n");
  assert.deepEqual(dyn, [at('js/net/relay.js')]);
  const multi = importsOf(at('js/app.js'), "import {\n  a,\n  b,\n} from './ui/dom.js';\n");
  assert.deepEqual(multi, [at('js/ui/dom.js')]);
  assert.equal(layerOf(at('sw.js')), 'worker');
});
