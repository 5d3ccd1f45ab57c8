// Owners: their leases (counting down) and their sandboxes.

import {api} from '../api.js';
import {h, fill, href, when, countdown, table, cell, section, dl, badge, loading, confirmControl, confirming} from '../dom.js';
import {sandboxRow, endControl, SANDBOX_COLUMNS} from './sandboxes.js';

// findOwner returns the owner named name, or null. The API lists owners by
// name with no way to get one: this pages through the list.
export async function findOwner(name, signal) {
  let cursor;
  for (;;) {
    const page = await api('/v1/owners', {query: {limit: 500, cursor}, signal});
    const found = page.items.find((o) => o.owner === name);
    if (found) return found;
    if (!page.next_cursor) return null;
    cursor = page.next_cursor;
  }
}

function leaseBadge(o) {
  return o.alive ? badge('alive', 'ok') : badge('lapsed', 'bad');
}

// A warm pool's owner (pool:NAME) is Tether's own: deleting the pool ends it.
const isPoolOwner = (name) => name.startsWith('pool:');

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 'es'}`;

// endOwnerControl is an owner's End button (DELETE /v1/owners/{owner}):
// it asks first, saying how many live sandboxes end (current() is the
// owner as last loaded, or null), and reports what ended in status.
function endOwnerControl(name, current, ctx, status, onClose) {
  return confirmControl({
    verb: 'End', label: `owner ${name}`, onError: ctx.showError, onClose,
    what: () => {
      const n = current()?.live_sandboxes;
      return n == null
        ? `End ${name}'s lease and all its live sandboxes?`
        : `End ${name}'s lease and its ${plural(n, 'live sandbox')}?`;
    },
    act: async () => {
      const res = await api(`/v1/owners/${encodeURIComponent(name)}`, {method: 'DELETE'});
      fill(status, `Owner ${name} ended: ${plural(res.sandboxes_ended, 'sandbox')} ended.`);
    },
  });
}

// ownerActions is what the owners table offers for o: a pool's owner is
// its pool's; an owner with a lapsed lease and no live sandbox has nothing
// left to end.
function ownerActions(o, current, ctx, status, onClose) {
  if (isPoolOwner(o.owner)) {
    return h('a', {href: href('pools', o.owner.slice('pool:'.length)), 'aria-label': `The pool of ${o.owner}`}, 'Its pool');
  }
  if (!o.alive && o.live_sandboxes === 0) return h('span', {class: 'muted'}, '—');
  return endOwnerControl(o.owner, current, ctx, status, onClose);
}

export async function ownersView(main, _params, ctx) {
  const cursor = ctx.query.get('cursor');
  const list = h('div', {id: 'owners'}, loading('owners'));
  const status = h('p', {class: 'progress', role: 'status', id: 'owner-status'});
  const pager = h('nav', {class: 'pager', 'aria-label': 'Pages'});
  fill(main,
    h('h1', {tabindex: '-1'}, 'Owners'),
    h('p', {class: 'help'}, 'An owner keeps its sandboxes alive by renewing its lease (PUT /v1/owners/{owner}/lease); when the lease lapses, its sandboxes end. Ending an owner ends its lease and its live sandboxes at once (reason owner_released).'),
    status, list, pager);
  let owners = new Map();
  // While an End is being confirmed, redraws wait (see sandboxes.js).
  const closed = () => { if (!confirming(list)) reload(); };
  async function load() {
    const page = await api('/v1/owners', {query: {limit: 100, cursor}, signal: ctx.signal});
    owners = new Map(page.items.map((o) => [o.owner, o]));
    if (confirming(list)) return;
    const rows = page.items.map((o) => h('tr', {dataset: {owner: o.owner}},
      cell('Owner', h('a', {href: href('owners', o.owner)}, o.owner)),
      cell('Lease', leaseBadge(o)),
      cell('Lapses', countdown(o.expires_at)),
      cell('Live sandboxes', h('a', {href: `#/sandboxes?owner=${encodeURIComponent(o.owner)}`, 'aria-label': `${o.live_sandboxes} live sandboxes of ${o.owner}`}, String(o.live_sandboxes))),
      cell('First seen', when(o.created_at)),
      cell('Actions', ownerActions(o, () => owners.get(o.owner), ctx, status, closed))));
    fill(list, table('Owners by name', ['Owner', 'Lease', 'Lapses', 'Live sandboxes', 'First seen', 'Actions'], rows, {empty: 'No owners yet.'}));
    fill(pager,
      cursor ? h('a', {href: '#/owners'}, '← First page') : null,
      page.next_cursor ? h('a', {href: `#/owners?cursor=${encodeURIComponent(page.next_cursor)}`, rel: 'next'}, 'Next page →') : null);
  }
  const reload = () => load().catch(ctx.showError);
  // Renewals are not events: poll. Sandbox events change the live counts.
  ctx.every(5000, () => { if (!document.hidden) reload(); });
  let timer;
  ctx.subscribe(() => { clearTimeout(timer); timer = setTimeout(reload, 500); });
  ctx.onLeave(() => clearTimeout(timer));
  await load();
}

export async function ownerView(main, [name], ctx) {
  const lease = h('div', {}, loading());
  const boxes = h('div', {id: 'owner-sandboxes'}, loading('sandboxes'));
  const status = h('p', {class: 'progress', role: 'status', id: 'owner-status'});
  const actions = h('div', {class: 'page-actions', role: 'group', 'aria-label': 'Actions'});
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/owners'}, 'Owners'), ' › ', name),
    h('h1', {tabindex: '-1'}, 'Owner ', name),
    actions, status,
    section('Lease', lease),
    section('Sandboxes', boxes,
      h('p', {}, h('a', {href: `#/sandboxes?owner=${encodeURIComponent(name)}`}, 'Filter the sandboxes table by this owner'))));
  let owner = null;
  // While an End is being confirmed, redraws of the table wait (see sandboxes.js).
  const closed = () => { if (!confirming(boxes)) reload(); };
  if (!isPoolOwner(name)) fill(actions, endOwnerControl(name, () => owner, ctx, status, closed));
  async function load() {
    const [found, page] = await Promise.all([
      findOwner(name, ctx.signal),
      api('/v1/sandboxes', {query: {owner: name, limit: 100}, signal: ctx.signal}),
    ]);
    owner = found;
    fill(lease, owner
      ? dl([['Lease', leaseBadge(owner)], ['Lapses', countdown(owner.expires_at)], ['Live sandboxes', String(owner.live_sandboxes)], ['First seen', when(owner.created_at)]])
      : h('p', {}, 'This owner has no lease on record.'));
    if (confirming(boxes)) return;
    fill(boxes, table(`Sandboxes of ${name}, newest first`, [...SANDBOX_COLUMNS, 'Actions'], page.items.map((sb) => sandboxRow(sb, (s) => endControl(s, ctx, closed))),
      {empty: 'No sandboxes.', className: 'sandboxes'}),
    page.next_cursor ? h('p', {class: 'help'}, 'Showing the newest 100.') : null);
  }
  const reload = () => load().catch(ctx.showError);
  ctx.every(5000, () => { if (!document.hidden) reload(); });
  let timer;
  ctx.subscribe(() => { clearTimeout(timer); timer = setTimeout(reload, 300); });
  ctx.onLeave(() => clearTimeout(timer));
  await load();
}
