// The service worker for a browser without module workers: sw-core.js alone (a relay
// workstation's notification then opens the page, which answers it).
importScripts('/sw-core.js');
