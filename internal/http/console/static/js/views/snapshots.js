// A sandbox's snapshots: taking one, the list of them (not deleted ones,
// newest first) with their state and size, deleting one, and starting a new
// sandbox from a ready one. The section lives on the sandbox page
// (sandbox.js).

import {api, errorText} from '../api.js';
import {h, fill, when, table, cell, badge, loading} from '../dom.js';
import {deleteControl} from './pools.js';

const STATE_KIND = {creating: 'warn', ready: 'ok', failed: 'bad', lost: 'bad', deleted: 'info'};

// bytes says a size in binary units: "4.0 KiB".
export function bytes(n) {
  if (n == null) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

// snapshotsSection draws the section's content into box and returns
// load(sb, provider), which redraws the list for the sandbox as it is now.
export function snapshotsSection(box, id, ctx) {
  const list = h('div', {id: 'snapshots'}, loading());
  const help = h('p', {class: 'help', id: 'snapshot-help'});
  const status = h('p', {class: 'progress', role: 'status', id: 'snapshot-status'});
  const error = h('p', {class: 'error', role: 'alert', id: 'snapshot-error'});
  const take = h('button', {type: 'button', id: 'take-snapshot', 'aria-describedby': 'snapshot-help'}, 'Take a snapshot');
  fill(box, help, h('div', {class: 'actions'}, take), status, error, list);

  let sb = null;
  let provider = null;
  const confirming = () => list.querySelector('button[aria-label^="Confirm: "]') != null;

  async function startFrom(sn, button) {
    error.textContent = '';
    button.disabled = true;
    try {
      const made = await api('/v1/sandboxes', {method: 'POST', body: {provider: sn.provider, from_snapshot: sn.id}});
      ctx.navigate(`#/sandboxes/${encodeURIComponent(made.id)}`);
    } catch (err) {
      if (err?.name === 'AbortError') return;
      error.textContent = errorText(err);
      button.disabled = false;
      button.focus();
    }
  }

  function row(sn) {
    const start = h('button', {type: 'button', class: 'secondary', 'aria-label': `Start a sandbox from snapshot ${sn.id}`}, 'Start a sandbox from it');
    start.addEventListener('click', () => startFrom(sn, start));
    return h('tr', {dataset: {snapshot: sn.id, state: sn.state}},
      cell('Snapshot', h('code', {}, sn.id)),
      cell('State', badge(sn.state, STATE_KIND[sn.state] ?? 'info'), sn.error ? h('span', {class: 'reason error'}, ` ${sn.error}`) : null),
      cell('Kind', sn.kind),
      cell('Size', sn.state === 'ready' ? bytes(sn.size_bytes) : h('span', {class: 'muted'}, '—')),
      cell('Taken', when(sn.created_at)),
      cell('Ready', sn.ready_at ? when(sn.ready_at) : h('span', {class: 'muted'}, '—')),
      cell('Expires', sn.expires_at ? when(sn.expires_at) : h('span', {class: 'muted'}, 'kept until deleted')),
      cell('Actions', h('div', {class: 'row-actions'},
        sn.state === 'ready' ? start : null,
        deleteControl(() => 'Delete it? Its data goes at the next reconciliation.', `snapshot ${sn.id}`, async () => {
          await api(`/v1/snapshots/${encodeURIComponent(sn.id)}`, {method: 'DELETE'});
          await load(sb, provider, true);
        }, ctx))));
  }

  async function load(s = sb, p = provider, force = false) {
    sb = s;
    provider = p;
    const cannot = provider && !provider.capabilities?.snapshot;
    fill(help, 'A snapshot copies the sandbox’s /workspace; it outlives the sandbox, and a new sandbox of the same provider can start from it. It needs a ready or paused sandbox.',
      cannot ? ` The ${sb.provider} provider has no snapshots: Tether will refuse.` : '');
    if (confirming() && !force) return;
    const {items} = await api('/v1/snapshots', {query: {sandbox: id, limit: 200}, signal: ctx.signal});
    fill(list, table('Snapshots of this sandbox, newest first', ['Snapshot', 'State', 'Kind', 'Size', 'Taken', 'Ready', 'Expires', 'Actions'], items.map(row),
      {empty: 'No snapshots.', className: 'snapshots'}));
  }

  take.addEventListener('click', async () => {
    error.textContent = '';
    take.disabled = true;
    fill(status, h('span', {class: 'spinner', 'aria-hidden': 'true'}), 'Taking a snapshot…');
    try {
      // The snapshot is listed while it is taken; the wait returns once it is not.
      const sn = await api(`/v1/sandboxes/${encodeURIComponent(id)}/snapshots`, {method: 'POST', query: {wait: '30s'}});
      if (sn.state === 'failed') error.textContent = `Snapshot ${sn.id} failed: ${sn.error ?? 'no reason given'}`;
      fill(status, sn.state === 'creating' ? `Snapshot ${sn.id} is still being taken.` : `Snapshot ${sn.id}: ${sn.state}.`);
      await load(sb, provider, true);
    } catch (err) {
      if (err?.name === 'AbortError') return;
      status.replaceChildren();
      error.textContent = errorText(err);
    } finally {
      take.disabled = false;
    }
  });
  return load;
}
