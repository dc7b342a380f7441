// The page's small key-value store in IndexedDB (database `agent-bridge`, store `kv`), shared
// with the service worker (sw.js reads the kept token from it): the Web Push key and token
// (attention.js) and the outbox (outbox.js).

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
