// workstations.js's deviceName: what a paired browser is called in `agent-bridge clients`.
// User agents as the browsers send them (Chrome on a Pixel, Safari on an iPhone and an iPad,
// Firefox on Linux, Edge on Windows). node --test, run by tests/test_relay_cli_wording.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

globalThis.localStorage ??= { getItem: () => null, setItem: () => {} };
const { deviceName } = await import('../../bridge/web/js/net/workstations.js');

test('Android is Android, not the Linux its platform reports', () => {
  const ua = 'Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) '
    + 'Chrome/126.0.0.0 Mobile Safari/537.36';
  assert.equal(deviceName(ua, 'Linux armv8l'), 'agent-bridge web (Chrome on Android)');
});

test('iPhone, iPad, Linux, Windows', () => {
  const iphone = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 '
    + '(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1';
  const ipad = 'Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 '
    + '(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1';
  const firefox = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
  const edge = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) '
    + 'Chrome/126.0.0.0 Safari/537.36 Edg/126.0.0.0';
  assert.equal(deviceName(iphone, 'iPhone'), 'agent-bridge web (Safari on iPhone)');
  assert.equal(deviceName(ipad, 'iPad'), 'agent-bridge web (Safari on iPad)');
  assert.equal(deviceName(firefox, 'Linux x86_64'), 'agent-bridge web (Firefox on Linux)');
  assert.equal(deviceName(edge, 'Win32'), 'agent-bridge web (Edge on Windows)');
});

test('nothing known: the platform, else "browser"', () => {
  assert.equal(deviceName('', 'Plan9'), 'agent-bridge web (Plan9)');
  assert.equal(deviceName('', ''), 'agent-bridge web (browser)');
});
