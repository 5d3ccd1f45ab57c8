// Needs attention: what an operator should look at. Sandboxes ended but
// not released past a threshold, failed creates, sandboxes their provider
// lost, and what reconciliation destroyed or failed to destroy.

import {api, pages} from '../api.js';
import {h, fill, href, stateBadge, when, table, cell, section, duration, badge, loading} from '../dom.js';

const DEFAULTS = {unreleased: 5, window: 24}; // minutes; hours

function number(q, name, min, max) {
  if (!q.get(name)) return DEFAULTS[name];
  const v = Number(q.get(name));
  return Number.isFinite(v) && v >= min && v <= max ? v : DEFAULTS[name];
}

const idLink = (id) => h('a', {href: href('sandboxes', id), class: 'mono'}, id);

export async function attentionView(main, _params, ctx) {
  const unreleasedMin = number(ctx.query, 'unreleased', 0, 100000);
  const windowH = number(ctx.query, 'window', 1, 24 * 90);
  const minutes = h('input', {id: 'a-unreleased', name: 'unreleased', type: 'number', min: '0', step: '1', value: String(unreleasedMin)});
  const hours = h('input', {id: 'a-window', name: 'window', type: 'number', min: '1', step: '1', value: String(windowH)});
  const form = h('form', {class: 'filters panel inline', 'aria-label': 'Thresholds'},
    h('div', {class: 'field'}, h('label', {for: 'a-unreleased'}, 'Unreleased for more than (minutes)'), minutes),
    h('div', {class: 'field'}, h('label', {for: 'a-window'}, 'Look back (hours)'), hours),
    h('div', {class: 'actions'}, h('button', {type: 'submit'}, 'Apply')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    ctx.navigate(`#/attention?unreleased=${encodeURIComponent(minutes.value)}&window=${encodeURIComponent(hours.value)}`);
  });
  const unreleased = h('div', {}, loading());
  const failed = h('div', {}, loading());
  const lost = h('div', {}, loading());
  const reconcile = h('div', {}, loading());
  const parts = [['Ended but not released', unreleased], ['Failed creates', failed], ['Lost by their provider', lost], ['Reconciliation', reconcile]]
    .map(([title, body]) => {
      const n = h('span', {class: 'count'});
      const sec = section(title, body);
      sec.querySelector('h2').append(' ', n);
      return [sec, n];
    });
  fill(main, h('h1', {tabindex: '-1'}, 'Needs attention'), form, parts.map(([sec]) => sec));
  const count = (i, n, more) => { parts[i][1].textContent = `(${n}${more ? '+' : ''})`; };

  async function load() {
    const now = Date.now();
    const since = new Date(now - windowH * 3600_000).toISOString();
    const [ended, failedPage, terminated, findings] = await Promise.all([
      api('/v1/sandboxes', {query: {state: 'cancelled,terminated,failed', released: 'false', limit: 500}, signal: ctx.signal}),
      api('/v1/sandboxes', {query: {state: 'failed', created_after: since, limit: 200}, signal: ctx.signal}),
      api('/v1/sandboxes', {query: {reason: 'lost', created_after: new Date(Date.now() - 30 * 86_400_000).toISOString(), limit: 500}, signal: ctx.signal}),
      pages('/v1/reconcile-events', {limit: 500}, {max: 10000, signal: ctx.signal}),
    ]);

    const stuck = ended.items.filter((s) => s.ended_at && now - new Date(s.ended_at) > unreleasedMin * 60_000);
    fill(unreleased, table('Ended, not released', ['Sandbox', 'State', 'Provider', 'Ended', 'Unreleased for', 'Release error'],
      stuck.map((s) => h('tr', {dataset: {id: s.id}},
        cell('Sandbox', idLink(s.id)),
        cell('State', stateBadge(s.state), s.reason ? h('span', {class: 'reason'}, s.reason) : null),
        cell('Provider', s.provider),
        cell('Ended', when(s.ended_at)),
        cell('Unreleased for', duration(now - new Date(s.ended_at))),
        cell('Release error', s.release_error ? h('span', {class: 'error'}, s.release_error) : h('span', {class: 'muted'}, '—')))),
    {empty: `Every sandbox that ended more than ${unreleasedMin} minutes ago is released.`}));
    count(0, stuck.length, Boolean(ended.next_cursor));

    fill(failed, table('Failed creates', ['Sandbox', 'Provider', 'Created', 'Attempts', 'Error'],
      failedPage.items.map((s) => h('tr', {dataset: {id: s.id}},
        cell('Sandbox', idLink(s.id)),
        cell('Provider', s.provider),
        cell('Created', when(s.created_at)),
        cell('Attempts', String(s.attempts)),
        cell('Error', h('span', {class: 'error'}, s.error ?? s.reason ?? '')))),
    {empty: `No create failed in the last ${windowH} h.`}));
    count(1, failedPage.items.length, Boolean(failedPage.next_cursor));

    const lostItems = terminated.items.filter((s) => s.ended_at && new Date(s.ended_at) >= new Date(since));
    fill(lost, table('Lost sandboxes', ['Sandbox', 'Provider', 'Provider ID', 'Ended', 'Released'],
      lostItems.map((s) => h('tr', {dataset: {id: s.id}},
        cell('Sandbox', idLink(s.id)),
        cell('Provider', s.provider),
        cell('Provider ID', s.provider_id ?? '—'),
        cell('Ended', when(s.ended_at)),
        cell('Released', s.released ? 'yes' : badge('pending', 'warn')))),
    {empty: `No sandbox was lost in the last ${windowH} h.`}),
    h('p', {class: 'help'}, 'Sandboxes ended with reason lost (by their provider, or with their node), created in the last 30 days.'));
    count(2, lostItems.length, Boolean(terminated.next_cursor));

    const recent = findings.items.filter((e) => new Date(e.at) >= new Date(since)).reverse();
    const kind = {orphan_destroyed: ['orphan destroyed', 'warn'], orphan_destroy_failed: ['orphan destroy failed', 'bad'], lost: ['lost', 'bad']};
    fill(reconcile, table('Reconciliation findings, newest first', ['When', 'Action', 'Sandbox', 'Provider', 'Message'],
      recent.map((e) => h('tr', {dataset: {action: e.action}},
        cell('When', when(e.at)),
        cell('Action', badge(...(kind[e.action] ?? [e.action, 'info']))),
        cell('Sandbox', idLink(e.sandbox_id)),
        cell('Provider', e.provider),
        cell('Message', e.message))),
    {empty: `Reconciliation found nothing in the last ${windowH} h.`}));
    count(3, recent.length, findings.more);
  }
  ctx.every(15_000, () => { if (!document.hidden) load().catch(ctx.showError); });
  let timer;
  ctx.subscribe(() => { clearTimeout(timer); timer = setTimeout(() => load().catch(ctx.showError), 1000); });
  ctx.onLeave(() => clearTimeout(timer));
  await load();
}
