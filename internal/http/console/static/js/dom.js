// DOM building and formatting. Everything the API returns reaches the page
// as text (text nodes, textContent, attribute values): never as HTML.

const PROPS = new Set(['value', 'checked', 'selected', 'disabled', 'hidden']);

// h makes an element: h('a', {href: '#/x', class: 'y', onclick: fn}, 'text', child).
// Strings become text nodes; null, undefined and false are skipped.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props ?? {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (PROPS.has(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// fill replaces el's children.
export function fill(el, ...children) {
  el.replaceChildren();
  add(el, children);
  return el;
}

// link to a console route; parts are encoded.
export function href(...parts) {
  return '#/' + parts.map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join('/');
}

export const LIVE = ['requested', 'creating', 'ready', 'pausing', 'paused', 'resuming'];
export const TERMINAL = ['cancelled', 'terminated', 'failed'];
export const STATES = [...LIVE, ...TERMINAL];
// TRANSITIONING are the in-flight states of a pause and a resume.
export const TRANSITIONING = ['pausing', 'resuming'];

const GLYPH = {requested: '○', creating: '◔', ready: '●', pausing: '◑', paused: '❚❚', resuming: '◐', cancelled: '⊘', terminated: '■', failed: '✕'};

// stateBadge shows a state by colour, a glyph and its name: never colour alone.
export function stateBadge(state) {
  return h('span', {class: `state state-${STATES.includes(state) ? state : 'unknown'}`},
    h('span', {class: 'glyph', 'aria-hidden': 'true'}, GLYPH[state] ?? '?'), state);
}

export function badge(text, kind) {
  return h('span', {class: `badge badge-${kind}`}, text);
}

const pad = (n) => String(n).padStart(2, '0');

// localTime formats an RFC 3339 time in the browser's zone.
export function localTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// duration says how long ms is, to a useful precision.
export function duration(ms) {
  if (ms == null || Number.isNaN(ms)) return '';
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(a)} ms`;
  if (a < 10_000) return `${(a / 1000).toFixed(1)} s`;
  const s = Math.round(a / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const hr = Math.floor(m / 60);
  if (hr < 24) return m % 60 ? `${hr} h ${m % 60} min` : `${hr} h`;
  const d = Math.floor(hr / 24);
  return hr % 24 ? `${d} d ${hr % 24} h` : `${d} d`;
}

// relative says when iso is from now: "3 min ago", "in 5 s".
export function relative(iso, now = Date.now()) {
  if (!iso) return '';
  const ms = new Date(iso).getTime() - now;
  if (Math.abs(ms) < 1000) return 'now';
  return ms < 0 ? `${duration(-ms)} ago` : `in ${duration(ms)}`;
}

// when is a <time> showing the relative time, with the exact time as its
// tooltip; the app's ticker keeps the text current.
export function when(iso) {
  if (!iso) return h('span', {class: 'muted'}, '—');
  return h('time', {datetime: iso, title: localTime(iso), dataset: {relative: ''}}, relative(iso));
}

// countdown is a <time> counting down to iso ("0:42 left"), then up ("lapsed 12 s ago").
export function countdown(iso, lapsedWord = 'lapsed') {
  return h('time', {datetime: iso, title: localTime(iso), dataset: {countdown: lapsedWord}}, countdownText(iso, lapsedWord));
}

export function countdownText(iso, lapsedWord, now = Date.now()) {
  const ms = new Date(iso).getTime() - now;
  if (ms <= 0) return `${lapsedWord} ${duration(-ms)} ago`;
  const s = Math.ceil(ms / 1000);
  const hr = Math.floor(s / 3600);
  const clock = hr > 0 ? `${hr}:${pad(Math.floor(s / 60) % 60)}:${pad(s % 60)}` : `${Math.floor(s / 60)}:${pad(s % 60)}`;
  return `${clock} left`;
}

// tick refreshes every relative time and countdown on the page.
export function tick(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll('time[data-relative]')) el.textContent = relative(el.dateTime, now);
  for (const el of root.querySelectorAll('time[data-countdown]')) {
    el.textContent = countdownText(el.dateTime, el.dataset.countdown, now);
    el.classList.toggle('lapsed', new Date(el.dateTime).getTime() <= now);
  }
}

export function labelsList(labels) {
  const keys = Object.keys(labels ?? {}).sort();
  if (keys.length === 0) return h('span', {class: 'muted'}, '—');
  return h('ul', {class: 'labels'}, keys.map((k) => h('li', {}, h('code', {}, `${k}=${labels[k]}`))));
}

// table makes a responsive table: on narrow screens each row becomes a card
// whose cells are titled by data-label (see console.css).
export function table(caption, columns, rows, {empty = 'Nothing to show.', className = ''} = {}) {
  const body = h('tbody', {}, rows);
  const t = h('table', {class: `grid ${className}`},
    h('caption', {class: 'visually-hidden'}, caption),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', {scope: 'col'}, c)))),
    body);
  const wrap = h('div', {class: 'table-wrap'}, t);
  if (rows.length === 0) wrap.append(h('p', {class: 'empty'}, empty));
  return wrap;
}

// cell is a <td> titled for the card layout.
export function cell(label, ...content) {
  return h('td', {'data-label': label}, content);
}

// loading is what a part of a page shows while its data is on its way:
// replaced by the data, or by "Not loaded." when the request failed.
export function loading(what = '') {
  return h('p', {class: 'loading', role: 'status'},
    h('span', {class: 'spinner', 'aria-hidden': 'true'}), what ? `Loading ${what}…` : 'Loading…');
}

// notLoaded replaces every loading note left under root: its data will not come.
export function notLoaded(root) {
  for (const el of root.querySelectorAll('.loading')) el.replaceWith(h('p', {class: 'empty not-loaded'}, 'Not loaded.'));
}

export function section(title, ...content) {
  const id = 'sec-' + title.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return h('section', {class: 'panel', 'aria-labelledby': id}, h('h2', {id}, title), content);
}

// dl makes a description list from [term, value] pairs, skipping null values.
export function dl(pairs) {
  return h('dl', {class: 'facts'}, pairs.filter(([, v]) => v != null && v !== false)
    .map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
}

// percentile of sorted numbers (nearest rank).
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

// isoToLocalInput and localInputToISO convert between RFC 3339 and the
// value of an <input type="datetime-local">.
export function isoToLocalInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function localInputToISO(v) {
  if (!v) return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

// shownOnce is a notice for a value the API shows this once (a webhook's
// secret, a preview's URL): the value as text with a Copy button, extra
// controls after it, and a button that dismisses the notice (done). It
// returns the notice and the Copy button, to focus.
export function shownOnce({heading, text, label, value, id, extra = [], dismiss = 'I have stored it', done}) {
  const shown = h('code', {class: 'secret', id}, value);
  const copy = h('button', {type: 'button', class: 'secondary'}, 'Copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(value);
      copy.textContent = 'Copied';
    } catch {
      getSelection().selectAllChildren(shown);
      copy.textContent = 'Selected: press Ctrl+C';
    }
  });
  const ok = h('button', {type: 'button'}, dismiss);
  ok.addEventListener('click', done);
  return [h('div', {class: 'panel notice'},
    h('p', {}, h('strong', {}, heading), ' ', text),
    h('p', {class: 'secret-row'}, h('span', {class: 'muted'}, label), ' ', shown, ' ', copy, extra),
    ok), copy];
}

// confirmControl is a button that asks before it acts. Its first press
// shows what acting does (what(), read then), a Confirm and a Cancel; act
// runs on Confirm. verb names the action ("Delete", "End") and label what
// it acts on ("sandbox sbx_…"): the buttons are named "<verb> <label>" and
// "Confirm: <verb> <label>". A failure goes to onError and the question
// stays; onClose runs once the question is gone (cancelled, or acted on),
// so that a view that held back its redraws meanwhile can catch up.
export function confirmControl({verb, label, what, act, onError, onClose = () => {}}) {
  const box = h('div', {class: 'row-actions'});
  const ask = h('button', {type: 'button', class: 'danger', 'aria-label': `${verb} ${label}`}, verb);
  ask.addEventListener('click', () => {
    const confirm = h('button', {type: 'button', class: 'danger', 'aria-label': `Confirm: ${verb.toLowerCase()} ${label}`}, `Confirm ${verb.toLowerCase()}`);
    const cancel = h('button', {type: 'button', class: 'secondary'}, 'Cancel');
    cancel.addEventListener('click', () => {
      fill(box, ask);
      ask.focus();
      onClose();
    });
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      cancel.disabled = true;
      try {
        await act();
      } catch (err) {
        confirm.disabled = false;
        cancel.disabled = false;
        onError(err);
        return;
      }
      fill(box, ask);
      ask.focus();
      onClose();
    });
    fill(box, h('span', {class: 'help'}, what()), confirm, cancel);
    confirm.focus();
  });
  box.append(ask);
  return box;
}

// confirming reports whether a question of confirmControl's is open under
// root: a view does not redraw it away under the pointer.
export function confirming(root) {
  return root.querySelector('button[aria-label^="Confirm: "]') != null;
}
