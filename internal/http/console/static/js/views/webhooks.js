// Webhooks: the tenant's endpoints (their filter and state), adding one
// (its signing secret shown once), deleting one, and an endpoint's
// delivery history with replay. The API takes a key with manage_keys.

import {api, errorText} from '../api.js';
import {h, fill, href, when, table, cell, section, dl, badge, stateBadge, shownOnce, loading, STATES} from '../dom.js';
import {deleteControl} from './pools.js';

// REASONS are the event reasons an endpoint may filter on.
const REASONS = ['requested', 'owner_released', 'owner_expired', 'expired', 'create_failed', 'lost', 'pause_failed', 'resume_failed',
  'pool_deleted', 'pool_shrunk', 'owner_transferred', 'outage_credited'];

export function stateOf(w) {
  return w.state === 'failing'
    ? h('span', {class: 'nowrap'}, badge('failing', 'bad'), ' since ', when(w.failing_since))
    : badge(w.state, w.state === 'active' ? 'ok' : 'warn');
}

function filterText(f) {
  const states = f.states ?? [];
  const reasons = f.reasons ?? [];
  if (states.length === 0 && reasons.length === 0) return h('span', {class: 'muted'}, 'every event');
  return h('span', {class: 'filter'},
    states.length ? h('span', {}, 'into ', states.map((s, i) => [i ? ' ' : '', stateBadge(s)])) : null,
    states.length && reasons.length ? ' and ' : null,
    reasons.length ? h('span', {}, 'reason ', reasons.map((r, i) => [i ? ', ' : '', h('code', {}, r)])) : null);
}

function checks(legend, name, values) {
  return h('fieldset', {class: 'checks'}, h('legend', {}, legend),
    values.map((v) => h('label', {class: 'check'}, h('input', {type: 'checkbox', name, value: v}), ' ', name === 'state' ? stateBadge(v) : h('code', {}, v))));
}

// secretNotice shows a new endpoint's secret, which the API shows this once.
function secretNotice(res, done) {
  return shownOnce({
    heading: `Endpoint ${res.webhook.id} added.`,
    text: 'Its signing secret is shown this once: store it with the receiver now. Every delivery is signed with it (the Tether-Signature header: HMAC-SHA256 of "<t>.<raw body>").',
    label: 'Secret', value: res.secret, id: 'new-webhook-secret', done,
  });
}

export async function webhooksView(main, _params, ctx) {
  const list = h('div', {id: 'webhooks'}, loading('endpoints'));
  const created = h('div', {class: 'created', role: 'status', 'aria-live': 'polite'});
  const url = h('input', {id: 'wh-url', name: 'url', type: 'url', required: true, maxlength: '2048', autocomplete: 'off', spellcheck: 'false', placeholder: 'https://hooks.example.com/tether'});
  const description = h('input', {id: 'wh-description', name: 'description', maxlength: '200', autocomplete: 'off', placeholder: 'ops alerts'});
  const states = checks('Only events into these states (none: any)', 'state', STATES);
  const reasons = checks('Only events with these reasons (none: any)', 'reason', REASONS);
  const error = h('p', {class: 'error', role: 'alert', id: 'wh-create-error'});
  const submit = h('button', {type: 'submit'}, 'Add endpoint');
  const form = h('form', {class: 'stack', 'aria-label': 'Add a webhook endpoint'},
    h('div', {class: 'fields'},
      h('div', {class: 'field'}, h('label', {for: 'wh-url'}, 'URL'), url),
      h('div', {class: 'field'}, h('label', {for: 'wh-description'}, 'Description'), description)),
    states, reasons,
    h('div', {class: 'actions'}, submit),
    error);
  fill(main,
    h('h1', {tabindex: '-1'}, 'Webhooks'),
    h('p', {class: 'help'}, 'Endpoints get the tenant’s events POSTed to them, signed, in order, retried for WEBHOOK_RETRY_FOR; then the endpoint is failing and gets nothing until it is replayed. These pages take an API key with manage_keys.'),
    section('Endpoints', list),
    section('Add an endpoint', form, created));

  async function load() {
    const {items} = await api('/v1/webhooks', {signal: ctx.signal});
    const rows = items.map((w) => h('tr', {dataset: {webhook: w.id, state: w.state}},
      cell('Endpoint', h('a', {href: href('webhooks', w.id), class: 'wrap'}, w.url), w.description ? h('span', {class: 'reason'}, w.description) : null),
      cell('Events', filterText(w.events)),
      cell('State', stateOf(w)),
      cell('Created', when(w.created_at)),
      cell('Actions', deleteControl(() => 'Stop deliveries and delete it?', `webhook ${w.url}`, async () => {
        await api(`/v1/webhooks/${encodeURIComponent(w.id)}`, {method: 'DELETE'});
        await load();
      }, ctx))));
    fill(list, table('Webhook endpoints, oldest first', ['Endpoint', 'Events', 'State', 'Created', 'Actions'], rows,
      {empty: 'No endpoints.', className: 'webhooks'}));
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const picked = (fs) => [...fs.querySelectorAll('input:checked')].map((i) => i.value);
    const body = {url: url.value.trim()};
    if (description.value.trim()) body.description = description.value.trim();
    const events = {states: picked(states), reasons: picked(reasons)};
    if (events.states.length || events.reasons.length) body.events = events;
    submit.disabled = true;
    try {
      const res = await api('/v1/webhooks', {method: 'POST', body});
      const [notice, copy] = secretNotice(res, () => { created.replaceChildren(); url.focus(); });
      fill(created, notice);
      form.reset();
      await load();
      copy.focus();
    } catch (err) {
      error.textContent = errorText(err);
      url.focus();
    } finally {
      submit.disabled = false;
    }
  });
  ctx.every(5000, () => { if (!document.hidden) load().catch(ctx.showError); });
  await load();
}

const DELIVERY_KIND = {pending: 'warn', delivered: 'ok', failed: 'bad', cancelled: 'info'};

function deliveryRow(d, onReplay) {
  const replay = h('button', {type: 'button', class: 'secondary', 'aria-label': `Replay from delivery ${d.id}`}, 'Replay from here');
  replay.addEventListener('click', () => onReplay(d, replay));
  const n = d.event_ids.length;
  return h('tr', {dataset: {delivery: d.id, status: d.status}},
    cell('Delivery', h('code', {}, d.id)),
    cell('Status', badge(d.status, DELIVERY_KIND[d.status] ?? 'info')),
    cell('Events', h('span', {title: d.event_ids.join(', ')}, `${n} (${n ? `${d.event_ids[0]}${n > 1 ? `–${d.event_ids.at(-1)}` : ''}` : 'none'})`)),
    cell('Attempts', String(d.attempts)),
    cell('Response', d.response_status != null ? h('code', {}, String(d.response_status)) : h('span', {class: 'muted'}, '—')),
    cell('Last error', d.error ? h('span', {class: 'error'}, d.error) : h('span', {class: 'muted'}, '—')),
    cell('Created', when(d.created_at)),
    cell('Last attempt', when(d.last_attempt_at)),
    cell('Next', d.status === 'delivered' ? h('span', {}, 'delivered ', when(d.delivered_at)) : d.next_attempt_at ? when(d.next_attempt_at) : h('span', {class: 'muted'}, '—')),
    cell('Actions', n ? replay : null));
}

export async function webhookView(main, [id], ctx) {
  const title = h('h1', {tabindex: '-1'}, 'Webhook ', h('span', {class: 'mono'}, id));
  const facts = h('div', {}, loading());
  const actions = h('div', {class: 'page-actions', role: 'group', 'aria-label': 'Actions'});
  const status = h('p', {class: 'progress', role: 'status', id: 'replay-status'});
  const deliveries = h('div', {id: 'deliveries'}, loading('deliveries'));
  const more = h('div');
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/webhooks'}, 'Webhooks'), ' › ', h('span', {class: 'mono'}, id)),
    title, actions, status,
    section('Summary', facts),
    section('Deliveries', h('p', {class: 'help'}, 'Newest first. A delivery is one batch of events, resent under the same id until the receiver answers 2xx or retries run out. A replay sends the events again from a point, in new deliveries; the endpoint becomes active again.'), deliveries, more));

  let w;
  const items = [];
  let cursor;

  async function replay(body, button, what) {
    if (button) button.disabled = true;
    fill(status, h('span', {class: 'spinner', 'aria-hidden': 'true'}), `Replaying ${what}…`);
    try {
      await api(`/v1/webhooks/${encodeURIComponent(id)}/replay`, {method: 'POST', body});
      fill(status, `Replay started ${what}: new deliveries follow.`);
      await load();
    } catch (err) {
      fill(status, h('span', {class: 'error'}, errorText(err)));
    } finally {
      if (button) button.disabled = false;
    }
  }

  async function load() {
    w = await api(`/v1/webhooks/${encodeURIComponent(id)}`, {signal: ctx.signal});
    const page = await api(`/v1/webhooks/${encodeURIComponent(id)}/deliveries`, {query: {limit: 50}, signal: ctx.signal});
    items.splice(0, items.length, ...page.items);
    cursor = page.next_cursor;
    document.title = `${w.url} · webhooks · Tether`;
    fill(facts, dl([
      ['URL', h('code', {class: 'wrap'}, w.url)],
      ['Description', w.description || null],
      ['Events', filterText(w.events)],
      ['State', h('span', {id: 'webhook-state', dataset: {state: w.state}}, stateOf(w))],
      ['Delivered through', h('code', {}, w.cursor)],
      ['Created', when(w.created_at)],
      ['Created by key', w.created_by ? h('code', {}, w.created_by) : null],
    ]));
    drawDeliveries();
    if (!actions.firstChild) {
      const resume = h('button', {type: 'button', id: 'replay'}, 'Replay from where it stopped');
      resume.addEventListener('click', () => replay({}, resume, 'from where deliveries stopped'));
      fill(actions, resume, deleteControl(() => 'Stop deliveries and delete this endpoint?', `webhook ${w.url}`, async () => {
        await api(`/v1/webhooks/${encodeURIComponent(id)}`, {method: 'DELETE'});
        ctx.navigate('#/webhooks');
      }, ctx));
    }
  }

  function drawDeliveries() {
    const rows = items.map((d) => deliveryRow(d, (dd, button) => replay({from_delivery_id: dd.id}, button, `from delivery ${dd.id}`)));
    fill(deliveries, table('Deliveries, newest first', ['Delivery', 'Status', 'Events', 'Attempts', 'Response', 'Last error', 'Created', 'Last attempt', 'Next', 'Actions'], rows,
      {empty: 'No deliveries yet: one is made when a matching event happens.', className: 'deliveries'}));
    fill(more, cursor ? h('button', {type: 'button', class: 'secondary', onclick: () => loadMore().catch(ctx.showError)}, 'Load older deliveries') : null);
  }

  async function loadMore() {
    const page = await api(`/v1/webhooks/${encodeURIComponent(id)}/deliveries`, {query: {limit: 50, cursor}, signal: ctx.signal});
    items.push(...page.items);
    cursor = page.next_cursor;
    drawDeliveries();
  }

  // Deliveries are not events: poll (an event of the tenant may make one,
  // so look soon after one too).
  let timer;
  const refresh = () => { if (items.length > 50) return; clearTimeout(timer); timer = setTimeout(() => load().catch(ctx.showError), 1000); };
  ctx.subscribe(refresh);
  ctx.onLeave(() => { clearTimeout(timer); document.title = 'Tether console'; });
  ctx.every(3000, () => { if (!document.hidden && w && items.length <= 50) load().catch(ctx.showError); });
  await load();
}
