// The web client's service worker (registered as a module, js/views/attention.js): sw-core.js, plus
// answering a relay workstation's permission from its notification through the relay.
import './sw-core.js';
import { answerThroughRelay } from './js/net/relay-answer.js';

self.answerThroughRelay = answerThroughRelay;
