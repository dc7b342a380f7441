// The browser half of bench/browser.py: headless Chromium (playwright-core from
// tests/web/node_modules, the system Chromium) at phone size with the CPU slowed down, measuring
// a streamed answer and the first screen. Reads its job as JSON on stdin, prints results as
// JSON on stdout.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(HERE, '..', 'tests', 'web', 'package.json'));
const { chromium } = require('playwright-core');

const job = JSON.parse(readFileSync(0, 'utf8'));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});

async function phonePage() {
  const context = await browser.newContext({
    viewport: { width: 390, height: 844 }, deviceScaleFactor: 1, isMobile: true, hasTouch: true,
  });
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  return { context, page, cdp };
}

/** The renderer's main-thread tasks in a trace: their total and the longest, in ms. */
function mainThreadTasks(trace) {
  const { traceEvents } = JSON.parse(trace.toString('utf8'));
  const main = traceEvents.filter((e) => e.ph === 'M' && e.name === 'thread_name'
    && e.args?.name === 'CrRendererMain');
  const threads = new Set(main.map((e) => `${e.pid}:${e.tid}`));
  const tasks = traceEvents.filter((e) => e.ph === 'X' && typeof e.dur === 'number'
    && (e.name === 'ThreadControllerImpl::RunTask' || e.name === 'RunTask')
    && threads.has(`${e.pid}:${e.tid}`));
  // nested tasks (a task run inside another) are counted once, by the outer one
  tasks.sort((a, b) => a.ts - b.ts);
  let busy = 0;
  let longest = 0;
  let end = -Infinity;
  for (const t of tasks) {
    if (t.ts >= end) {
      busy += t.dur;
      end = t.ts + t.dur;
      longest = Math.max(longest, t.dur);
    }
  }
  return { busyMs: busy / 1000, longestMs: longest / 1000, tasks: tasks.length };
}

async function stream({ url, text, mode, rate, deltaChars, cpu }) {
  const { context, page, cdp } = await phonePage();
  try {
    await page.goto(url, { waitUntil: 'load' });
    await page.waitForFunction(() => window.benchReady === true);
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: cpu });
    await browser.startTracing(page, { categories: ['toplevel', '__metadata'] });
    const result = await page.evaluate((args) => window.runStream(args), { text, mode, rate, deltaChars });
    const trace = await browser.stopTracing();
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: 1 });
    return { ...result, ...mainThreadTasks(trace) };
  } finally {
    await context.close();
  }
}

async function firstScreen({ url, sessions, cpu, repeat, latencyMs, downKbps, upKbps }) {
  const { context, page, cdp } = await phonePage();
  try {
    // when the list shows every session, from the navigation's start
    await page.addInitScript((want) => {
      const seen = () => {
        if (document.querySelectorAll('#sessions .session-item').length >= want && !window.__listShown) {
          window.__listShown = performance.now();
        }
      };
      new MutationObserver(seen).observe(document, { childList: true, subtree: true });
    }, sessions);
    await page.goto(url, { waitUntil: 'load' }); // signs in (#token=), warms the caches
    await page.waitForFunction(() => window.__listShown, null, { timeout: 60_000 });
    await page.waitForFunction(() => navigator.serviceWorker?.controller !== undefined);
    await cdp.send('Network.enable');
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: cpu });
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false, latency: latencyMs,
      downloadThroughput: (downKbps * 1000) / 8, uploadThroughput: (upKbps * 1000) / 8,
    });
    const shown = [];
    for (let i = 0; i < repeat; i++) {
      await page.reload({ waitUntil: 'commit' });
      await page.waitForFunction(() => window.__listShown, null, { timeout: 60_000, polling: 50 });
      shown.push(await page.evaluate(() => window.__listShown));
    }
    return { shownMs: shown, controlled: await page.evaluate(() => Boolean(navigator.serviceWorker?.controller)) };
  } finally {
    await context.close();
  }
}

const out = [];
try {
  for (const run of job.runs) {
    out.push(run.kind === 'stream' ? await stream(run) : await firstScreen(run));
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out));
