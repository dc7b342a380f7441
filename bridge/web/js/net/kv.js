// The page's small key-value store in IndexedDB (database `agent-bridge`, store `kv`), shared
// with the service worker (sw-core.js reads the kept token from it, relay-answer.js the relay
// records): the Web Push key and token (attention.js), the outbox (outbox.js) and a copy of
// each relay workstation's record (workstations.js).

const DB = 'agent-bridge';
const STORE = 'kv';

/** Run `fn(store)` in one transaction; resolves with the result of the request it returns. */
export function idb(mode, fn) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onerror = () => reject(req.error);
    req.onsuccess = () => {
      const tx = req.result.transaction(STORE, mode);
      const result = fn(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(result?.result);
      tx.onerror = () => reject(tx.error);
    };
  });
}
