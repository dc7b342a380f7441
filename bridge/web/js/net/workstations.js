// Every workstation in one client: the daemons this browser knows, each with its own
// BridgeClient, its own agents and sessions, and a state a person can read.
//
// - "local": the daemon that served this page, reached directly with its token (the
//   original single-daemon flow; the token is kept where it always was, see app.js).
// - other direct daemons: a URL and a token (a `…#token=` link of another origin).
// - relay workstations: a record made by pairing from a `#relay=` link (relay.js); it holds
//   this browser's key pair for that workstation, so it stays in this browser's storage.
// The records (all but "local") are kept in localStorage under RECORDS_KEY.

import { BridgeClient, defaultUrl } from './protocol.js';
import { idb } from './kv.js';

export const LOCAL = 'local';

// The name a paired browser gets in `agent-bridge clients`: the device, read from the user
// agent first (Android's navigator.platform says "Linux x86_64" or "Linux armv8l"), then the
// platform, then the browser.
export function deviceName(userAgent = '', platform = '') {
  const ua = String(userAgent);
  const device = /Android/.test(ua) ? 'Android'
    : /iPad/.test(ua) ? 'iPad'
    : /iPhone|iPod/.test(ua) ? 'iPhone'
    : /CrOS/.test(ua) ? 'ChromeOS'
    : /Macintosh|Mac OS X/.test(ua) ? 'Mac'
    : /Windows/.test(ua) ? 'Windows'
    : /Linux/.test(ua) ? 'Linux'
    : String(platform || '').trim();
  const browser = /Edg\//.test(ua) ? 'Edge'
    : /Firefox\//.test(ua) ? 'Firefox'
    : /(Chrome|CriOS)\//.test(ua) ? 'Chrome'
    : /Safari\//.test(ua) ? 'Safari'
    : '';
  const parts = [browser, device].filter(Boolean);
  return `agent-bridge web (${parts.length ? parts.join(' on ') : 'browser'})`;
}
const RECORDS_KEY = 'agent-bridge.workstations';

export function loadRecords() {
  try {
    const list = JSON.parse(localStorage.getItem(RECORDS_KEY) || '[]');
    return Array.isArray(list)
      ? list.filter((r) => r && typeof r.id === 'string' && ['relay', 'direct'].includes(r.kind))
      : [];
  } catch {
    return [];
  }
}

export function saveRecord(record) {
  const list = loadRecords().filter((r) => r.id !== record.id);
  list.push(record);
  localStorage.setItem(RECORDS_KEY, JSON.stringify(list));
  mirror(record);
}

export function forgetRecord(id) {
  localStorage.setItem(RECORDS_KEY, JSON.stringify(loadRecords().filter((r) => r.id !== id)));
  idb('readwrite', (s) => s.delete(`ws:${id}`)).catch(() => {});
}

/** A relay record is also kept where the service worker can read it (it has no localStorage):
 *  it answers that workstation's notifications through the relay (js/net/relay-answer.js). */
function mirror(record) {
  if (record.kind === 'relay') idb('readwrite', (s) => s.put(record, `ws:${record.id}`)).catch(() => {});
}

/** The name to show for the daemon that served this page. */
function localName() {
  const host = window.location.hostname;
  return ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host) ? 'This computer' : host;
}

/** What a `…#token=` link of another origin is: a direct workstation record, or null. */
export function directRecord(linkUrl) {
  let url;
  try {
    url = new URL(linkUrl);
  } catch {
    return null;
  }
  const token = new URLSearchParams(url.hash.slice(1)).get('token');
  if (!token || !['http:', 'https:'].includes(url.protocol)) return null;
  return {
    kind: 'direct',
    id: `direct:${url.host}`,
    name: url.hostname,
    url: defaultUrl(url),
    token,
  };
}

const STATE_LABELS = {
  online: 'online',
  connecting: 'connecting…',
  offline: 'offline',
  relay_down: 'relay down',
  unauthorized: 'not paired',
  token_rejected: 'token rejected',
  refused: 'refused',
  stopped: 'stopped',
};

export class Workstation {
  /** `relay` is relay.js's module (loaded only when a relay workstation exists). */
  constructor({ id, kind, name, record = null, url, token, relay = null }) {
    this.id = id;
    this.kind = kind;
    this.record = record;
    this.agents = new Map();
    this.sessions = new Map();
    this.station = null;
    this.#name = name;
    if (kind === 'relay') {
      mirror(record); // one paired before the worker could read records
      this.station = new relay.RelayStation(record);
      // It got its own NATS login (a browser paired before the relay gave one): keep it.
      this.station.addEventListener('record', () => {
        if (!this.stopped) saveRecord(this.record);
      });
      this.closeCodes = relay.CLOSE;
      this.client = new BridgeClient({ transport: () => this.station.socket(), clientName: 'agent-bridge web' });
      // The relay is back: connect now, not when a backoff grown while it was down says
      // (up to 15 s later).
      this.station.addEventListener('relay', (ev) => {
        if (ev.detail.state === 'up') this.client.nudge(true);
      });
    } else {
      this.client = new BridgeClient({ url, token, clientName: 'agent-bridge web' });
    }
  }

  #name;

  get name() {
    return this.#name;
  }

  static local(token) {
    return new Workstation({ id: LOCAL, kind: 'direct', name: localName(), url: defaultUrl(), token });
  }

  static fromRecord(record, relay) {
    if (record.kind === 'relay') {
      return new Workstation({ id: record.id, kind: 'relay', name: record.name, record, relay });
    }
    return new Workstation({ id: record.id, kind: 'direct', name: record.name, record, url: record.url, token: record.token });
  }

  /** online | connecting | offline | relay_down | unauthorized | token_rejected | refused | stopped */
  get state() {
    const st = this.client.status;
    if (st.state === 'open') return 'online';
    if (st.refused) return 'refused';
    if (st.state === 'unauthorized') return this.kind === 'relay' ? 'unauthorized' : 'token_rejected';
    if (st.state === 'stopped') return 'stopped';
    if (this.kind === 'relay') {
      if (st.closeCode === this.closeCodes.RELAY_DOWN || this.station.relayState === 'down') {
        return st.state === 'connecting' && st.attempt === 0 ? 'connecting' : 'relay_down';
      }
      if (st.closeCode === this.closeCodes.OFFLINE) return 'offline';
    }
    return st.state === 'waiting' ? 'offline' : 'connecting';
  }

  get stateLabel() {
    return STATE_LABELS[this.state] || this.state;
  }

  /** Why this workstation cannot be reached, and what to do, in words (a phone has no
   *  tooltips); '' while it is online or connecting. */
  get reachNote() {
    const name = this.name || 'the workstation';
    // a daemon that cannot reach the relay (it does not trust its certificate, say) looks
    // offline from here: only the workstation can tell which
    const why = this.kind === 'relay' ? ` If its daemon is running, \`agent-bridge doctor\` there says why it cannot reach the relay (a relay certificate it does not trust, say).` : '';
    return {
      unauthorized: `This browser was revoked on ${name}: pair again with \`agent-bridge pair --relay\` there.`,
      relay_down: `The relay is down: ${name} cannot be reached. What you send waits here and goes once it is back.`,
      offline: (this.station && !this.station.noQueue
        ? `${name} cannot be reached right now. What you send waits on the relay, and ${name} takes it when it is back, even if this page is closed.`
        : `${name} cannot be reached right now. What you send waits here and goes once it is back.`) + why,
      token_rejected: `${name} rejected this browser's token: pair again with \`agent-bridge pair\`.`,
      refused: `${name} refused this page's origin: add \`${location.origin}\` to \`server.allowed_origins\` in its config.toml and restart its daemon.`,
      stopped: `Not connected to ${name}.`,
    }[this.state] || '';
  }

  /** Whether this workstation refuses this browser (revoked, a rejected token): waiting will
   *  not change it, pairing again will. */
  get refusesBrowser() {
    return ['unauthorized', 'token_rejected'].includes(this.state);
  }

  start() {
    this.client.start();
  }

  stop() {
    this.stopped = true;
    this.client.stop();
    this.station?.close();
  }
}
