// The console: sign-in, hash routing, the live event stream, and the views.

import {api, session, onUnauthorized, ApiError, errorText} from './api.js';
import {EventStream} from './sse.js';
import {h, fill, tick, notLoaded} from './dom.js';
import {sandboxesView} from './views/sandboxes.js';
import {sandboxView} from './views/sandbox.js';
import {createView} from './views/create.js';
import {ownersView, ownerView} from './views/owners.js';
import {providersView} from './views/providers.js';
import {attentionView} from './views/attention.js';
import {keysView} from './views/keys.js';
import {poolsView, poolView} from './views/pools.js';
import {webhooksView, webhookView} from './views/webhooks.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const sessionBox = document.getElementById('session');
const live = document.getElementById('live');
const flash = document.getElementById('flash');

const routes = [
  [/^\/sandboxes$/, 'sandboxes', sandboxesView],
  [/^\/sandboxes\/new$/, 'sandboxes', createView],
  [/^\/sandboxes\/([^/]+)$/, 'sandboxes', sandboxView],
  [/^\/owners$/, 'owners', ownersView],
  [/^\/owners\/([^/]+)$/, 'owners', ownerView],
  [/^\/providers$/, 'providers', providersView],
  [/^\/attention$/, 'attention', attentionView],
  [/^\/pools$/, 'pools', poolsView],
  [/^\/pools\/([^/]+)$/, 'pools', poolView],
  [/^\/webhooks$/, 'webhooks', webhooksView],
  [/^\/webhooks\/([^/]+)$/, 'webhooks', webhookView],
  [/^\/keys$/, 'keys', keysView],
  // Views still to come add their routes here, and a link in index.html's
  // nav: e.g. snapshots ([/^\/snapshots$/, 'snapshots', snapshotsView]).
];

// The live stream, shared by the views: each subscribes while it is shown.
const listeners = new Set();
const connectListeners = new Set();
let stream = null;

function startStream(key) {
  stream?.stop();
  stream = new EventStream({
    key,
    onEvent: (e) => { for (const fn of listeners) fn(e); },
    onConnect: () => { for (const fn of connectListeners) fn(); },
    onStatus: (status, message) => {
      live.dataset.status = status;
      live.textContent = status === 'live' ? 'Live' : status === 'connecting' ? 'Connecting…' : 'Reconnecting…';
      live.title = message ?? '';
    },
    onUnauthorized: (problem) => signOut(new ApiError(401, problem)),
  });
  stream.start();
}

// showError puts an API error (its problem's detail) where everyone sees it.
export function showError(err) {
  if (err?.name === 'AbortError') return;
  fill(flash, errorText(err));
  flash.hidden = false;
}


function clearFlash() {
  flash.replaceChildren();
  flash.hidden = true;
}

let current = {path: null, cleanup: null, controller: null};

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/sandboxes';
  const [path, qs = ''] = raw.split('?');
  return {path: path || '/sandboxes', query: new URLSearchParams(qs)};
}

// render shows the page the URL names. focus moves the keyboard focus to
// its heading when the page changed (not on the first page load, where the
// skip link comes first).
async function render({focus = true} = {}) {
  if (!session.key) {
    renderSignIn();
    return;
  }
  const {path, query} = parseHash();
  const found = routes.find(([re]) => re.test(path));
  if (!found) {
    location.replace('#/sandboxes');
    return;
  }
  const [re, navName, view] = found;
  const params = path.match(re).slice(1).map(decodeURIComponent);
  const samePage = current.path === path;
  current.cleanup?.();
  current.controller?.abort();
  clearFlash();
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.nav === navName) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const controller = new AbortController();
  const cleanups = [];
  const ctx = {
    query,
    signal: controller.signal,
    showError,
    clearFlash,
    // subscribe gets every event of the tenant while the view is shown.
    subscribe(fn) { listeners.add(fn); cleanups.push(() => listeners.delete(fn)); },
    // onReconnect runs after the stream (re)connects: a view refetches, in
    // case it loaded before the stream started.
    onReconnect(fn) { connectListeners.add(fn); cleanups.push(() => connectListeners.delete(fn)); },
    every(ms, fn) { const t = setInterval(fn, ms); cleanups.push(() => clearInterval(t)); },
    // onLeave runs when the view is replaced.
    onLeave(fn) { cleanups.push(fn); },
    navigate(hash) { location.hash = hash; },
  };
  current = {path, controller, cleanup: () => cleanups.forEach((fn) => fn())};
  main.replaceChildren();
  try {
    await view(main, params, ctx);
  } catch (err) {
    if (err?.name !== 'AbortError' && !(err instanceof ApiError && err.status === 401)) {
      showError(err);
      notLoaded(main);
    }
  }
  // A new page (not a new filter on the same page) moves focus to its
  // heading, so that screen readers announce it.
  if (focus && session.key && !samePage && document.activeElement !== main && !main.contains(document.activeElement)) {
    main.querySelector('h1')?.focus({preventScroll: true});
  }
}

function renderSignIn(message) {
  stream?.stop();
  stream = null;
  nav.hidden = true;
  sessionBox.hidden = true;
  current.cleanup?.();
  current.controller?.abort();
  current = {path: null, cleanup: null, controller: null};
  clearFlash();
  const input = h('input', {id: 'apikey', name: 'apikey', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false', 'aria-describedby': 'apikey-help'});
  const error = h('p', {class: 'error', id: 'signin-error', role: 'alert'});
  if (message) error.textContent = message;
  const button = h('button', {type: 'submit'}, 'Sign in');
  const form = h('form', {class: 'signin panel', 'aria-labelledby': 'signin-title'},
    h('h1', {id: 'signin-title', tabindex: '-1'}, 'Sign in to Tether'),
    h('label', {for: 'apikey'}, 'API key'),
    input,
    h('p', {class: 'help', id: 'apikey-help'},
      'The key is kept in this browser tab only (sessionStorage) and sent to this Tether as a Bearer token. Make one with ',
      h('code', {}, 'tether keys create --tenant NAME'), '.'),
    error,
    button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    button.disabled = true;
    error.textContent = '';
    try {
      await api('/v1/providers', {key, quiet401: true});
      signIn(key);
    } catch (err) {
      error.textContent = errorText(err);
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  main.replaceChildren(form);
  input.focus();
}

function signIn(key, {focus = true} = {}) {
  session.set(key);
  nav.hidden = false;
  sessionBox.hidden = false;
  startStream(key);
  if (!location.hash || location.hash === '#') location.replace('#/sandboxes');
  render({focus});
}

function signOut(err) {
  session.clear();
  renderSignIn(err ? `Signed out: ${errorText(err)}` : '');
}

onUnauthorized((err) => signOut(err));
document.getElementById('signout').addEventListener('click', () => signOut());
window.addEventListener('hashchange', () => { if (session.key) render(); });
setInterval(() => tick(), 1000);

// The skip link focuses the page's content without touching the URL's
// hash, which holds the route.
document.querySelector('.skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});

if (session.key) signIn(session.key, {focus: false});
else renderSignIn();
