// Owners: their leases (counting down) and their sandboxes.

import {api} from '../api.js';
import {h, fill, href, when, countdown, table, cell, section, dl, badge, loading} from '../dom.js';
import {sandboxRow, SANDBOX_COLUMNS} from './sandboxes.js';

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

export async function ownersView(main, _params, ctx) {
  const cursor = ctx.query.get('cursor');
  const list = h('div', {id: 'owners'}, loading('owners'));
  const pager = h('nav', {class: 'pager', 'aria-label': 'Pages'});
  fill(main,
    h('h1', {tabindex: '-1'}, 'Owners'),
    h('p', {class: 'help'}, 'An owner keeps its sandboxes alive by renewing its lease (PUT /v1/owners/{owner}/lease); when the lease lapses, its sandboxes end.'),
    list, pager);
  async function load() {
    const page = await api('/v1/owners', {query: {limit: 100, cursor}, signal: ctx.signal});
    const rows = page.items.map((o) => h('tr', {dataset: {owner: o.owner}},
      cell('Owner', h('a', {href: href('owners', o.owner)}, o.owner)),
      cell('Lease', leaseBadge(o)),
      cell('Lapses', countdown(o.expires_at)),
      cell('Live sandboxes', h('a', {href: `#/sandboxes?owner=${encodeURIComponent(o.owner)}`, 'aria-label': `${o.live_sandboxes} live sandboxes of ${o.owner}`}, String(o.live_sandboxes))),
      cell('First seen', when(o.created_at))));
    fill(list, table('Owners by name', ['Owner', 'Lease', 'Lapses', 'Live sandboxes', 'First seen'], rows, {empty: 'No owners yet.'}));
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
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/owners'}, 'Owners'), ' › ', name),
    h('h1', {tabindex: '-1'}, 'Owner ', name),
    section('Lease', lease),
    section('Sandboxes', boxes,
      h('p', {}, h('a', {href: `#/sandboxes?owner=${encodeURIComponent(name)}`}, 'Filter the sandboxes table by this owner'))));
  async function load() {
    const [owner, page] = await Promise.all([
      findOwner(name, ctx.signal),
      api('/v1/sandboxes', {query: {owner: name, limit: 100}, signal: ctx.signal}),
    ]);
    fill(lease, owner
      ? dl([['Lease', leaseBadge(owner)], ['Lapses', countdown(owner.expires_at)], ['Live sandboxes', String(owner.live_sandboxes)], ['First seen', when(owner.created_at)]])
      : h('p', {}, 'This owner has no lease on record.'));
    fill(boxes, table(`Sandboxes of ${name}, newest first`, SANDBOX_COLUMNS, page.items.map(sandboxRow),
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
