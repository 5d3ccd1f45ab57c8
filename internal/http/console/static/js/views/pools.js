// Warm pools: the tenant's pools with their fill, a pool's members (its
// unclaimed sandboxes, owned by pool:NAME) and the sandboxes it handed out,
// and creating, resizing and deleting pools.

import {api, errorText, providerList} from '../api.js';
import {h, fill, href, when, table, cell, section, dl, badge, confirmControl, loading, LIVE} from '../dom.js';
import {sandboxRow, SANDBOX_COLUMNS} from './sandboxes.js';

// POOL_LABEL is the label every member carries (a claimed one keeps it).
export const POOL_LABEL = 'tether.pool';
export const poolOwner = (name) => `pool:${name}`;

// fillMeter shows ready of min_ready as a bar, next to the numbers.
function fillMeter(p) {
  const want = Math.max(p.min_ready, 1);
  const pct = Math.min(100, Math.round((p.ready / want) * 100));
  const bar = h('span', {});
  bar.style.width = `${pct}%`;
  return h('span', {class: 'meter', role: 'img', 'aria-label': `${p.ready} of ${p.min_ready} ready`}, bar);
}

function fillBadge(p) {
  if (p.refill && p.refill.failures > 0) return badge('backing off', 'bad');
  if (p.ready >= p.min_ready) return badge('full', 'ok');
  return badge(p.size >= p.min_ready ? 'warming' : 'filling', 'warn');
}

const field = (id, label, input, help) => h('div', {class: 'field'}, h('label', {for: id}, label), input, help);
const number = (id, name, value, extra = {}) => h('input', {id, name, type: 'number', min: '0', max: '1000', step: '1', inputmode: 'numeric', value: value ?? '', ...extra});

// intOrNull reads a number input: an integer, or null when empty.
const intOrNull = (input) => (input.value.trim() === '' ? null : Number(input.value));

function createForm(providers, ctx, onCreated) {
  const name = h('input', {id: 'pool-name', name: 'name', required: true, maxlength: '63', autocomplete: 'off', spellcheck: 'false', placeholder: 'python', 'aria-describedby': 'pool-name-help'});
  const provider = h('select', {id: 'pool-provider', name: 'provider'},
    h('option', {value: ''}, 'Server default'),
    providers.map((p) => h('option', {value: p.name}, p.name)));
  const minReady = number('pool-min', 'min_ready', '2', {required: true});
  const maxSize = number('pool-max', 'max_size', '', {min: '1', placeholder: 'min ready', 'aria-describedby': 'pool-max-help'});
  const params = h('textarea', {id: 'pool-params', name: 'params', rows: '2', spellcheck: 'false', placeholder: '{"image": "python"}', 'aria-describedby': 'pool-params-help'});
  const error = h('p', {class: 'error', role: 'alert', id: 'pool-create-error'});
  const submit = h('button', {type: 'submit'}, 'Create pool');
  const form = h('form', {class: 'stack', 'aria-label': 'Create a warm pool'},
    h('div', {class: 'fields'},
      field('pool-name', 'Name', name, h('small', {class: 'help', id: 'pool-name-help'}, 'lowercase letters, digits and -')),
      field('pool-provider', 'Provider', provider),
      field('pool-min', 'Min ready', minReady),
      field('pool-max', 'Max size', maxSize, h('small', {class: 'help', id: 'pool-max-help'}, 'default: min ready'))),
    field('pool-params', 'Params (JSON, optional)', params, h('small', {class: 'help', id: 'pool-params-help'}, 'the provider options every member is created with, as for a create')),
    h('div', {class: 'actions'}, submit),
    error);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const body = {name: name.value.trim(), min_ready: intOrNull(minReady)};
    if (provider.value) body.provider = provider.value;
    if (intOrNull(maxSize) != null) body.max_size = intOrNull(maxSize);
    if (params.value.trim()) {
      try {
        body.params = JSON.parse(params.value);
      } catch (err) {
        error.textContent = `Params are not JSON: ${err.message}`;
        params.focus();
        return;
      }
    }
    submit.disabled = true;
    try {
      const p = await api('/v1/pools', {method: 'POST', body});
      form.reset();
      await onCreated(p);
    } catch (err) {
      error.textContent = errorText(err);
      name.focus();
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export async function poolsView(main, _params, ctx) {
  const list = h('div', {id: 'pools'}, loading('pools'));
  const creating = h('div', {}, loading());
  fill(main,
    h('h1', {tabindex: '-1'}, 'Warm pools'),
    h('p', {class: 'help'}, 'A pool keeps min ready sandboxes of one provider and params ready to claim (POST /v1/sandboxes with pool); claimed members are refilled within POOL_REFILL_INTERVAL. Members count against the tenant’s live-sandbox quota.'),
    section('Pools', list),
    section('Create a pool', creating));
  const form = providerList(ctx.signal).then((providers) => fill(creating, createForm(providers, ctx, async (p) => {
    await load();
    list.querySelector(`tr[data-pool="${CSS.escape(p.name)}"] a`)?.focus();
  })));

  async function load() {
    const {items} = await api('/v1/pools', {signal: ctx.signal});
    const rows = items.map((p) => h('tr', {dataset: {pool: p.name, size: p.size, ready: p.ready}},
      cell('Name', h('a', {href: href('pools', p.name)}, p.name)),
      cell('Provider', p.provider),
      cell('Min ready', String(p.min_ready)),
      cell('Max size', String(p.max_size)),
      cell('Size', String(p.size)),
      cell('Ready', h('span', {class: 'nowrap'}, String(p.ready), fillMeter(p)), ' ', fillBadge(p)),
      cell('Updated', when(p.updated_at))));
    fill(list, table('Warm pools by name', ['Name', 'Provider', 'Min ready', 'Max size', 'Size', 'Ready', 'Updated'], rows,
      {empty: 'No pools yet.', className: 'pools'}));
  }
  // Members change with events (created, ready, claimed, ended); a
  // claim is one too.
  let timer;
  const refresh = () => { clearTimeout(timer); timer = setTimeout(() => load().catch(ctx.showError), 300); };
  ctx.subscribe(refresh);
  ctx.onReconnect(refresh);
  ctx.onLeave(() => clearTimeout(timer));
  ctx.every(5000, () => { if (!document.hidden) load().catch(ctx.showError); });
  await Promise.all([load(), form]);
}

function resizeForm(p, ctx, onSaved) {
  const minReady = number('resize-min', 'min_ready', String(p.min_ready));
  const maxSize = number('resize-max', 'max_size', String(p.max_size), {min: '1', 'aria-describedby': 'resize-help'});
  const error = h('p', {class: 'error', role: 'alert', id: 'resize-error'});
  const submit = h('button', {type: 'submit'}, 'Save sizes');
  const form = h('form', {class: 'inline', 'aria-label': `Resize pool ${p.name}`},
    field('resize-min', 'Min ready', minReady),
    field('resize-max', 'Max size', maxSize),
    h('div', {class: 'actions'}, submit),
    h('p', {class: 'help', id: 'resize-help'}, 'Lowering max size below the pool’s size ends the surplus unclaimed members at once (reason pool_shrunk), those not yet ready first.'),
    error);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    // Only what changed is sent.
    const body = {};
    if (intOrNull(minReady) !== p.min_ready) body.min_ready = intOrNull(minReady);
    if (intOrNull(maxSize) !== p.max_size) body.max_size = intOrNull(maxSize);
    if (Object.keys(body).length === 0) {
      error.textContent = 'Nothing changed.';
      return;
    }
    submit.disabled = true;
    try {
      await onSaved(await api(`/v1/pools/${encodeURIComponent(p.name)}`, {method: 'PATCH', body}));
    } catch (err) {
      error.textContent = errorText(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// deleteControl is a Delete button that asks for confirmation first;
// what() says what deleting does. verb names the action ("Revoke").
export function deleteControl(what, label, onConfirm, ctx, verb = 'Delete') {
  return confirmControl({verb, label, what, act: onConfirm, onError: ctx.showError});
}

// refillFacts says whether the pool's refills are backing off after
// failed members, and the last error they saw.
function refillFacts(r) {
  if (!r) return '';
  const parts = [];
  if (r.failures > 0) {
    parts.push(`backing off after ${r.failures} failed round${r.failures === 1 ? '' : 's'}`);
    if (r.next_attempt_at) parts.push('next member at ', when(r.next_attempt_at));
  } else {
    parts.push(r.pending > 0 ? `${r.pending} member${r.pending === 1 ? '' : 's'} on their way` : 'ok');
  }
  if (r.last_error) parts.push('; last error ', when(r.last_error_at), ': ', h('code', {class: 'wrap'}, r.last_error));
  return h('span', {}, ...parts);
}

export async function poolView(main, [name], ctx) {
  const facts = h('div', {}, loading());
  const resize = h('div');
  const members = h('div', {id: 'members'}, loading('members'));
  const handed = h('div', {id: 'handed-out'}, loading());
  const danger = h('div');
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/pools'}, 'Warm pools'), ' › ', name),
    h('h1', {tabindex: '-1'}, 'Pool ', name),
    section('Summary', facts),
    section('Members', h('p', {class: 'help'}, `The pool’s unclaimed live sandboxes (owner ${poolOwner(name)}), newest first.`), members),
    section('Handed out', h('p', {class: 'help'},
      `Sandboxes labelled ${POOL_LABEL}=${name} that left the pool: claimed members, and sandboxes created like its members when none was ready (a miss). `,
      'The API does not tell the two apart; Tether’s /metrics counts hits and misses (tether_pool_claims_total, server-wide).'), handed),
    section('Resize', resize),
    section('Delete', h('p', {class: 'help'}, 'Deleting the pool ends its unclaimed members (reason pool_deleted); handed-out sandboxes are their owners’ and live on.'), danger));

  let pool;
  let drawnSizes = '';
  async function load() {
    const q = (extra) => api('/v1/sandboxes', {query: {label: `${POOL_LABEL}=${name}`, limit: 200, ...extra}, signal: ctx.signal});
    const [p, live, recent] = await Promise.all([
      api(`/v1/pools/${encodeURIComponent(name)}`, {signal: ctx.signal}),
      q({owner: poolOwner(name), state: LIVE.join(',')}),
      q({}),
    ]);
    pool = p;
    document.title = `${name} · pools · Tether`;
    fill(facts, dl([
      ['Provider', h('a', {href: '#/providers'}, p.provider)],
      ['Ready', h('span', {class: 'nowrap', id: 'pool-ready'}, `${p.ready} of ${p.min_ready}`, fillMeter(p)), ' ', fillBadge(p)],
      ['Size', h('span', {id: 'pool-size'}, String(p.size))],
      ['Min ready', String(p.min_ready)],
      ['Max size', String(p.max_size)],
      ['Params', h('code', {class: 'wrap'}, JSON.stringify(p.params))],
      ['Refill', h('span', {id: 'pool-refill'}, refillFacts(p.refill))],
      ['Handed out (last 200)', String(recent.items.filter((s) => s.owner !== poolOwner(name)).length)],
      ['Created', when(p.created_at)],
      ['Updated', when(p.updated_at)],
    ]));
    fill(members, table(`Members of pool ${name}`, SANDBOX_COLUMNS, live.items.map((sb) => sandboxRow(sb)),
      {empty: 'No members: the refiller adds them within an interval.', className: 'sandboxes'}));
    const out = recent.items.filter((s) => s.owner !== poolOwner(name));
    fill(handed, table(`Sandboxes pool ${name} handed out`, SANDBOX_COLUMNS, out.map((sb) => sandboxRow(sb)),
      {empty: 'None yet.', className: 'sandboxes'}));
    // The resize form is redrawn only when the sizes changed, so that a
    // refresh does not undo what is being typed.
    const sizes = `${p.min_ready}/${p.max_size}`;
    if (sizes !== drawnSizes) {
      drawnSizes = sizes;
      fill(resize, resizeForm(p, ctx, async () => { drawnSizes = ''; await load(); }));
    }
    if (!danger.firstChild) {
      fill(danger, deleteControl(() => `Delete pool ${name} and end its ${pool.size} unclaimed member${pool.size === 1 ? '' : 's'}?`, `pool ${name}`, async () => {
        await api(`/v1/pools/${encodeURIComponent(name)}`, {method: 'DELETE'});
        ctx.navigate('#/pools');
      }, ctx));
    }
  }
  let timer;
  const refresh = () => { clearTimeout(timer); timer = setTimeout(() => load().catch(ctx.showError), 300); };
  ctx.subscribe(refresh);
  ctx.onReconnect(refresh);
  ctx.onLeave(() => { clearTimeout(timer); document.title = 'Tether console'; });
  ctx.every(5000, () => { if (!document.hidden && pool) load().catch(ctx.showError); });
  await load();
}
