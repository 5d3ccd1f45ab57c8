// The REST API, as the console uses it: every request carries the API key
// signed in with, and every failure is an ApiError holding the problem+json
// the API answered with.

import {SSEParser} from './sse.js';

const STORAGE = 'tether.apiKey';

// session keeps the API key for this tab only (sessionStorage): closing the
// tab signs out.
export const session = {
  get key() { return sessionStorage.getItem(STORAGE); },
  set(key) { sessionStorage.setItem(STORAGE, key); },
  clear() { sessionStorage.removeItem(STORAGE); },
};

export class ApiError extends Error {
  constructor(status, problem = {}, retryAfter = null) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code ?? (status === 0 ? 'NETWORK' : '');
    this.detail = this.message;
    this.requestId = problem.request_id ?? '';
    this.retryAfter = retryAfter;
  }
}

// errorText says what went wrong: the problem's detail, its code and the
// request id to quote.
export function errorText(err) {
  if (!(err instanceof ApiError)) return `Error: ${err?.message ?? err}`;
  const extra = [err.code, err.requestId && `request ${err.requestId}`].filter(Boolean).join(', ');
  return extra ? `${err.detail} (${extra})` : err.detail;
}

let unauthorized = () => {};

// onUnauthorized sets what a 401 does: the app signs out.
export function onUnauthorized(fn) { unauthorized = fn; }

// url builds an API URL; arrays repeat their parameter, empty values are left out.
export function url(path, query = {}) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query)) {
    for (const x of Array.isArray(v) ? v : [v]) {
      if (x != null && x !== '') u.searchParams.append(k, String(x));
    }
  }
  return u;
}

// api calls the API and returns its JSON. A 401 signs out (unless
// {quiet401: true}) and every non-2xx throws ApiError.
export async function api(path, {method = 'GET', query, body, signal, key = session.key, quiet401 = false} = {}) {
  const headers = {Accept: 'application/json', Authorization: `Bearer ${key}`};
  let payload;
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  let resp;
  // A read that fails to reach Tether (a laptop changing networks) is tried
  // twice more; so is a DELETE, which the API makes idempotent.
  const tries = method === 'GET' || method === 'DELETE' ? 3 : 1;
  for (let i = 1; ; i++) {
    try {
      resp = await fetch(url(path, query), {method, headers, body: payload, signal, cache: 'no-store', credentials: 'omit'});
      break;
    } catch (err) {
      if (err.name === 'AbortError') throw err;
      if (i >= tries) throw new ApiError(0, {detail: `Tether could not be reached (${err.message}).`});
      await new Promise((r) => setTimeout(r, 300 * i));
    }
  }
  if (!resp.ok) throw await failure(resp, quiet401);
  if (resp.status === 204) return null;
  return resp.json();
}

// failure is the ApiError of a response that is not 2xx; a 401 signs out
// (unless quiet401).
async function failure(resp, quiet401) {
  const problem = await resp.json().catch(() => ({}));
  const err = new ApiError(resp.status, problem, resp.headers.get('Retry-After'));
  if (resp.status === 401 && !quiet401) unauthorized(err);
  return err;
}

// apiEvents POSTs body to path asking for Server-Sent Events and passes
// each event on as it comes ({type, data}, data parsed as JSON) until the
// stream ends. A refusal before the stream began throws ApiError; an
// answer that is plain JSON after all is passed on as one event of type
// 'json'. It is never retried: a POST may have acted.
export async function apiEvents(path, {body, signal, onEvent}) {
  const headers = {Accept: 'text/event-stream', Authorization: `Bearer ${session.key}`, 'Content-Type': 'application/json'};
  let resp;
  try {
    resp = await fetch(url(path), {method: 'POST', headers, body: JSON.stringify(body), signal, cache: 'no-store', credentials: 'omit'});
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, {detail: `Tether could not be reached (${err.message}).`});
  }
  if (!resp.ok) throw await failure(resp, false);
  if (!(resp.headers.get('Content-Type') ?? '').startsWith('text/event-stream')) {
    onEvent({type: 'json', data: await resp.json()});
    return;
  }
  const parser = new SSEParser((ev) => {
    let data = null;
    try { data = JSON.parse(ev.data); } catch { /* left null */ }
    onEvent({type: ev.type, data});
  });
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      parser.push(value);
    }
  } finally {
    reader.releaseLock();
  }
}

// pages follows next_cursor and returns up to max items.
export async function pages(path, query = {}, {max = 2000, signal} = {}) {
  const items = [];
  let cursor;
  for (;;) {
    const page = await api(path, {query: {...query, cursor}, signal});
    items.push(...page.items);
    if (!page.next_cursor || items.length >= max) return {items, more: Boolean(page.next_cursor)};
    cursor = page.next_cursor;
  }
}

// providerList returns the providers, or none where they cannot be read
// (a view still works without them). An aborted read (the view was left
// meanwhile) is thrown on, never taken for "none": the left view must stop
// there, not draw itself over the page that replaced it.
export async function providerList(signal) {
  try {
    return (await api('/v1/providers', {signal})).items;
  } catch (err) {
    if (err?.name === 'AbortError') throw err;
    return [];
  }
}
