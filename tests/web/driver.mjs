// A line-based remote control for headless Chromium, driven by tests/web/browser.py.
//
// stdin: one JSON request per line {"id", "op", ...args}; stdout: one JSON answer per line
// {"id", "result"} or {"id", "error"}. It launches the system Chromium through playwright-core
// (no browser download) and keeps pages by number, each in its own context (fresh storage).
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    // a test's own (tests/web/browser.py Browser(extra_args=...)): host mappings, trust
    ...JSON.parse(process.env.CHROMIUM_EXTRA_ARGS || '[]'),
  ],
});

const pages = new Map();
let nextPage = 1;

function pageOf(args) {
  const entry = pages.get(args.page);
  if (!entry) throw new Error(`no page ${args.page}`);
  return entry;
}

const ops = {
  async open({ width = 1280, height = 800, mobile = false, dark = false }) {
    const context = await browser.newContext({
      viewport: { width, height },
      colorScheme: dark ? 'dark' : 'light',
      deviceScaleFactor: 1,
      isMobile: mobile,
      hasTouch: mobile,
    });
    const page = await context.newPage();
    const entry = { page, context, logs: [] };
    page.on('console', (msg) => entry.logs.push({ type: msg.type(), text: msg.text() }));
    page.on('pageerror', (err) => entry.logs.push({ type: 'pageerror', text: String(err) }));
    page.setDefaultTimeout(15_000);
    const id = nextPage++;
    pages.set(id, entry);
    return id;
  },
  async close(args) {
    const { context } = pageOf(args);
    pages.delete(args.page);
    await context.close();
  },
  async goto(args) {
    await pageOf(args).page.goto(args.url, { waitUntil: 'load' });
  },
  async reload(args) {
    await pageOf(args).page.reload({ waitUntil: 'load' });
  },
  async click(args) {
    await pageOf(args).page.locator(args.sel).first().click({ timeout: args.ms });
  },
  async fill(args) {
    await pageOf(args).page.locator(args.sel).first().fill(args.value);
  },
  async press(args) {
    await pageOf(args).page.locator(args.sel).first().press(args.key);
  },
  async select(args) {
    await pageOf(args).page.locator(args.sel).first().selectOption(args.value);
  },
  async wait(args) {
    await pageOf(args).page.locator(args.sel).first()
      .waitFor({ state: args.state || 'visible', timeout: args.ms });
  },
  async waitFn(args) {
    // Polled from here: page.waitForFunction evaluates with eval() in the page, which the
    // client's CSP (rightly) forbids; page.evaluate goes through the DevTools protocol.
    const { page } = pageOf(args);
    const deadline = Date.now() + (args.ms ?? 15_000);
    for (;;) {
      if (await page.evaluate(args.expr)) return;
      if (Date.now() > deadline) throw new Error(`timed out waiting for: ${args.expr}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  },
  async eval(args) {
    return await pageOf(args).page.evaluate(args.expr);
  },
  async text(args) {
    return await pageOf(args).page.locator(args.sel).first().innerText();
  },
  async texts(args) {
    return await pageOf(args).page.locator(args.sel).allInnerTexts();
  },
  async count(args) {
    return await pageOf(args).page.locator(args.sel).count();
  },
  async setFiles(args) {
    const files = args.files.map((f) => ({
      name: f.name, mimeType: f.mime, buffer: Buffer.from(f.b64, 'base64'),
    }));
    await pageOf(args).page.locator(args.sel).first().setInputFiles(files);
  },
  async screenshot(args) {
    await pageOf(args).page.screenshot({ path: args.path, fullPage: Boolean(args.fullPage) });
  },
  async url(args) {
    return pageOf(args).page.url();
  },
  // The page closed and opened again in the same profile (its storage kept): the old
  // page's tab is gone, a new one stands in its place under the same number.
  async reopen(args) {
    const entry = pageOf(args);
    await entry.page.close();
    entry.page = await entry.context.newPage();
    entry.page.on('console', (msg) => entry.logs.push({ type: msg.type(), text: msg.text() }));
    entry.page.on('pageerror', (err) => entry.logs.push({ type: 'pageerror', text: String(err) }));
    entry.page.setDefaultTimeout(15_000);
  },
  async resize(args) {
    await pageOf(args).page.setViewportSize({ width: args.width, height: args.height });
  },
  async logs(args) {
    return pageOf(args).logs;
  },
  async grant(args) {
    await pageOf(args).context.grantPermissions(args.permissions, { origin: args.origin });
  },
  // The page's service worker (waits for it): evaluate an expression in its global scope.
  async swEval(args) {
    const { context } = pageOf(args);
    const worker = context.serviceWorkers()[0]
      || await context.waitForEvent('serviceworker', { timeout: args.ms ?? 15_000 });
    return await worker.evaluate(args.expr);
  },
  // A push message as a push service would deliver it (DevTools' ServiceWorker domain).
  async push(args) {
    const entry = pageOf(args);
    if (!entry.cdp) {
      entry.cdp = await entry.context.newCDPSession(entry.page);
      entry.registrations = [];
      entry.cdp.on('ServiceWorker.workerRegistrationUpdated', (ev) => {
        for (const r of ev.registrations) {
          if (!r.isDeleted) entry.registrations.push(r);
        }
      });
      await entry.cdp.send('ServiceWorker.enable');
    }
    const deadline = Date.now() + 10_000;
    let reg;
    while (!(reg = entry.registrations.find((r) => r.scopeURL.startsWith(args.origin)))) {
      if (Date.now() > deadline) throw new Error(`no service worker registered for ${args.origin}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await entry.cdp.send('ServiceWorker.deliverPushMessage', {
      origin: args.origin, registrationId: reg.registrationId, data: args.data,
    });
  },
};

const rl = createInterface({ input: process.stdin });
const reply = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
reply({ id: 0, result: { ready: true, version: browser.version() } });
for await (const line of rl) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  const op = ops[req.op];
  try {
    if (!op) throw new Error(`unknown op ${req.op}`);
    const result = await op(req);
    reply({ id: req.id, result: result === undefined ? null : result });
  } catch (err) {
    reply({ id: req.id, error: String(err && err.message ? err.message : err) });
  }
}
await browser.close();
