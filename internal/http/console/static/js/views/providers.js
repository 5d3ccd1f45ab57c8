// Providers: availability and capabilities from GET /v1/providers, and
// figures computed from the tenant's recent sandboxes on each (the API
// has no per-provider statistics of its own).

import {api} from '../api.js';
import {h, fill, badge, dl, duration, percentile, stateBadge, loading, STATES} from '../dom.js';

// SAMPLE is how many recent sandboxes per provider the figures come from.
const SAMPLE = 200;

// stats computes a provider's figures from its sandboxes.
export function stats(items) {
  const ms = (a, b) => new Date(b) - new Date(a);
  const create = items.filter((s) => s.ready_at).map((s) => ms(s.created_at, s.ready_at)).sort((a, b) => a - b);
  const release = items.filter((s) => s.released_at && s.ended_at).map((s) => ms(s.ended_at, s.released_at)).sort((a, b) => a - b);
  const byState = Object.fromEntries(STATES.map((s) => [s, 0]));
  for (const s of items) byState[s.state] = (byState[s.state] ?? 0) + 1;
  return {
    n: items.length,
    byState,
    createP50: percentile(create, 50),
    createP95: percentile(create, 95),
    createN: create.length,
    releaseP50: percentile(release, 50),
    releaseP95: percentile(release, 95),
    releaseN: release.length,
    failed: items.filter((s) => s.state === 'failed').length,
    lost: items.filter((s) => s.reason === 'lost').length,
    unreleased: items.filter((s) => s.ended_at && !s.released).length,
  };
}

const latency = (p50, p95, n) => (n === 0 ? h('span', {class: 'muted'}, 'no data') : `p50 ${duration(p50)} · p95 ${duration(p95)} (${n})`);

function providerCard(p, s) {
  return h('article', {class: 'panel provider', dataset: {provider: p.name}},
    h('h2', {}, p.name, p.default ? badge('default', 'info') : null),
    h('p', {}, p.available ? badge('available', 'ok') : badge('unavailable', 'bad'),
      p.reason ? h('span', {class: 'reason'}, ` ${p.reason}`) : null),
    dl([
      ['Exec', p.capabilities.exec ? 'yes' : 'no'],
      ['Files', p.capabilities.files ? 'yes' : 'no'],
      ['Pause', p.capabilities.pause ? 'yes' : 'no'],
      ['Ports', p.capabilities.ports ? 'yes' : 'no'],
      ['Snapshots', p.capabilities.snapshot ? 'yes' : 'no'],
      ['Work dir', p.work_dir ? h('code', {}, p.work_dir) : null],
      ['Images', p.images?.length ? h('ul', {class: 'labels'}, p.images.map((i) => h('li', {}, h('code', {}, i.name)))) : null],
    ]),
    p.notes.length ? h('ul', {class: 'notes'}, p.notes.map((n) => h('li', {}, n))) : null,
    h('h3', {}, `Your last ${s.n} sandbox${s.n === 1 ? '' : 'es'} here`),
    dl([
      ['Request → ready', latency(s.createP50, s.createP95, s.createN)],
      ['Ended → released', latency(s.releaseP50, s.releaseP95, s.releaseN)],
      ['Failed creates', String(s.failed)],
      ['Lost', String(s.lost)],
      ['Ended, not yet released', String(s.unreleased)],
    ]),
    h('ul', {class: 'state-counts', 'aria-label': `${p.name}: sandboxes by state`},
      STATES.map((st) => h('li', {}, stateBadge(st), ' ', h('span', {class: 'n'}, String(s.byState[st]))))));
}

export async function providersView(main, _params, ctx) {
  const cards = h('div', {class: 'cards'}, loading('providers'));
  fill(main,
    h('h1', {tabindex: '-1'}, 'Providers'),
    h('p', {class: 'help'}, `Availability is the provider’s own report. The figures come from this tenant’s ${SAMPLE} most recent sandboxes on each provider, read from the sandbox list: the API offers no per-provider statistics.`),
    cards);
  async function load() {
    const {items} = await api('/v1/providers', {signal: ctx.signal});
    const recent = await Promise.all(items.map((p) => api('/v1/sandboxes', {query: {provider: p.name, limit: SAMPLE}, signal: ctx.signal})));
    fill(cards, items.map((p, i) => providerCard(p, stats(recent[i].items))));
  }
  ctx.every(15_000, () => { if (!document.hidden) load().catch(ctx.showError); });
  await load();
}
