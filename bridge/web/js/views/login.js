// Signing in: the daemon's token (typed in once, or taken from the pairing URL's #token=…),
// or a relay pairing link. Shown while this browser reaches no workstation.

import { $, clear, codeSpans } from '../ui/dom.js';
import { readFragment, writeFragment } from '../ui/address.js';

const TOKEN_KEY = 'agent-bridge.token';

export function takeToken() {
  const params = readFragment();
  const fromUrl = params.get('token');
  if (fromUrl) {
    // Keep it, then drop it from the address bar and history so it is not shared by accident.
    saveToken(fromUrl, true);
    params.delete('token');
    writeFragment(params);
    return fromUrl;
  }
  return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
}

export function saveToken(token, remember) {
  forgetToken();
  (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
}

export class LoginView {
  constructor(app) {
    this.app = app;
    this.relayOrigin = undefined;
  }

  init() {
    $('#login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('#token').value.trim();
      if (!token) return;
      saveToken(token, $('#remember').checked);
      $('#token').value = '';
      this.app.connect(token);
    });
  }

  show(error) {
    $('#main').hidden = true;
    $('#login').hidden = false;
    $('#login-error').hidden = !error;
    clear($('#login-error')).append(...codeSpans(error || ''));
    $('#token').focus();
    // Served by `relay serve`: there is no daemon here to sign in to, only relay pairing.
    this.servedByRelay().then((relay) => {
      if (!relay) return;
      $('#login-form').hidden = true;
      $('#login-link h2').textContent = 'Pair through a relay';
      $('#login-link-input').focus();
    });
  }

  hide() {
    $('#login').hidden = true;
    $('#main').hidden = false;
  }

  /** Whether `agent-bridge relay serve` served this page (its /healthz says `relay: true`;
   *  a daemon's says its relay link's state), asked once, only when the sign-in page shows. */
  async servedByRelay() {
    if (this.relayOrigin === undefined) {
      try {
        const res = await fetch('/healthz', { cache: 'no-store' });
        this.relayOrigin = res.ok && (await res.json()).relay === true;
      } catch {
        this.relayOrigin = false;
      }
    }
    return this.relayOrigin;
  }
}
