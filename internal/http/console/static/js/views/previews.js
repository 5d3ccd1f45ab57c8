// A sandbox's preview URLs: making one (its URL, token included, shown
// once), the list of them (revoked and expired ones included) and revoking
// one. The section lives on the sandbox page (sandbox.js).

import {api, errorText} from '../api.js';
import {h, fill, when, countdown, table, cell, badge, shownOnce, loading} from '../dom.js';
import {deleteControl} from './pools.js';

// previewState is live, revoked or expired, at now.
export function previewState(p, now = Date.now()) {
  if (p.revoked_at) return 'revoked';
  return new Date(p.expires_at).getTime() <= now ? 'expired' : 'live';
}

const STATE_KIND = {live: 'ok', revoked: 'bad', expired: 'warn'};

function urlNotice(p, done) {
  const open = h('a', {href: p.url, target: '_blank', rel: 'noopener noreferrer', class: 'button secondary', id: 'new-preview-open'}, 'Open');
  return shownOnce({
    heading: `Preview ${p.id} made for port ${p.port}.`,
    text: 'Its URL is shown this once: anyone holding it reaches the port without an API key until it expires, is revoked or the sandbox ends.',
    label: 'URL', value: p.url, id: 'new-preview-url', extra: [' ', open], dismiss: 'Done', done,
  });
}

// previewsSection draws the section's content into box and returns
// load(sb, provider), which redraws the list for the sandbox as it is now.
export function previewsSection(box, id, ctx) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/previews`;
  const list = h('div', {id: 'previews'}, loading());
  const created = h('div', {class: 'created', role: 'status', 'aria-live': 'polite'});
  const help = h('p', {class: 'help', id: 'preview-help'});
  const port = h('input', {id: 'preview-port', name: 'port', type: 'number', min: '1', max: '65535', step: '1', inputmode: 'numeric', required: true, placeholder: '8000'});
  const ttl = h('input', {id: 'preview-ttl', name: 'ttl_seconds', type: 'number', min: '1', step: '1', inputmode: 'numeric', placeholder: 'server default', 'aria-describedby': 'preview-ttl-help'});
  const error = h('p', {class: 'error', role: 'alert', id: 'preview-error'});
  const submit = h('button', {type: 'submit'}, 'Make preview URL');
  const form = h('form', {class: 'stack', 'aria-label': 'Make a preview URL'},
    h('div', {class: 'fields'},
      h('div', {class: 'field'}, h('label', {for: 'preview-port'}, 'Port'), port),
      h('div', {class: 'field'}, h('label', {for: 'preview-ttl'}, 'TTL (seconds)'), ttl,
        h('small', {class: 'help', id: 'preview-ttl-help'}, 'empty: PREVIEW_TTL (1 h by default), at most PREVIEW_MAX_TTL'))),
    h('div', {class: 'actions'}, submit),
    error);
  fill(box, help, list, h('h3', {}, 'Make a preview URL'), form, created);

  let sb = null;
  let provider = null;
  // A confirmation being answered is not redrawn away under the pointer.
  const confirming = () => list.querySelector('button[aria-label^="Confirm: "]') != null;

  async function load(s = sb, p = provider, force = false) {
    sb = s;
    provider = p;
    const cannot = provider && !provider.capabilities?.ports;
    fill(help, 'A preview URL reaches a port the sandbox listens on (its own loopback) without an API key; its traffic is in the activity below (kind preview). It needs a ready sandbox.',
      cannot ? ` The ${sb.provider} provider has no ports: Tether will refuse.` : '');
    if (confirming() && !force) return;
    const {items} = await api(base, {signal: ctx.signal});
    const now = Date.now();
    const rows = items.map((pv) => {
      const state = previewState(pv, now);
      return h('tr', {dataset: {preview: pv.id, state}},
        cell('Preview', h('code', {}, pv.id)),
        cell('Port', String(pv.port)),
        cell('State', state === 'revoked' ? h('span', {class: 'nowrap'}, badge('revoked', 'bad'), ' ', when(pv.revoked_at)) : badge(state, STATE_KIND[state])),
        cell('Expires', state === 'live' ? countdown(pv.expires_at, 'expired') : when(pv.expires_at)),
        cell('Created', when(pv.created_at)),
        cell('Actions', state === 'live'
          ? deleteControl(() => 'Revoke it? Its URL answers 410 at once.', `preview ${pv.id}`, async () => {
            await api(`${base}/${encodeURIComponent(pv.id)}`, {method: 'DELETE'});
            await load(sb, provider, true);
          }, ctx, 'Revoke')
          : null));
    });
    fill(list, table('Preview URLs, oldest first', ['Preview', 'Port', 'State', 'Expires', 'Created', 'Actions'], rows,
      {empty: 'No preview URLs.', className: 'previews'}));
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const body = {port: Number(port.value)};
    if (ttl.value.trim() !== '') body.ttl_seconds = Number(ttl.value);
    submit.disabled = true;
    try {
      const p = await api(base, {method: 'POST', body});
      const [notice, copy] = urlNotice(p, () => { created.replaceChildren(); port.focus(); });
      fill(created, notice);
      form.reset();
      await load(sb, provider, true);
      copy.focus();
    } catch (err) {
      if (err?.name === 'AbortError') return;
      error.textContent = errorText(err);
      port.focus();
    } finally {
      submit.disabled = false;
    }
  });
  return load;
}
