// The sandboxes table: every filter GET /v1/sandboxes has, kept in the URL,
// and live updates from the event stream.

import {api, providerList} from '../api.js';
import {h, fill, href, stateBadge, when, labelsList, table, cell, STATES, TERMINAL, isoToLocalInput, localInputToISO, badge, loading, notLoaded, confirmControl, confirming} from '../dom.js';

// The list's query parameters, as the API names them.
const FILTERS = ['state', 'reason', 'owner', 'provider', 'label', 'created_after', 'created_before', 'released', 'limit', 'cursor'];

// apiQuery turns the page's URL query into the API's.
export function apiQuery(q) {
  const out = {};
  for (const name of FILTERS) {
    if (name === 'label') out.label = q.getAll('label').filter(Boolean);
    else if (q.get(name)) out[name] = q.get(name);
  }
  return out;
}

const releasedText = (sb) => {
  if (!TERMINAL.includes(sb.state)) return h('span', {class: 'muted'}, '—');
  if (sb.released) return 'yes';
  return badge(sb.release_error ? 'no: failing' : 'pending', 'warn');
};

// endQuestion says what ending sb does, for the confirmation.
export function endQuestion(sb) {
  if (sb.state === 'requested' || sb.state === 'creating') return 'End it? Its creation is cancelled.';
  return sb.on_end === 'snapshot'
    ? 'End it now? Its /workspace is snapshotted, then its processes stop and its resources are released.'
    : 'End it now? Its processes stop and its resources, files included, are released.';
}

// endControl is a live sandbox's End button (DELETE /v1/sandboxes/{id}),
// which asks first; onClose runs when the question is gone (see
// confirmControl). An ended sandbox gets a dash.
export function endControl(sb, ctx, onClose) {
  if (TERMINAL.includes(sb.state)) return h('span', {class: 'muted'}, '—');
  return confirmControl({
    verb: 'End', label: `sandbox ${sb.id}`, what: () => endQuestion(sb), onError: ctx.showError, onClose,
    act: () => api(`/v1/sandboxes/${encodeURIComponent(sb.id)}`, {method: 'DELETE'}),
  });
}

// sandboxRow is one table row; the owner and pool views use it too. With
// actions (a function of the sandbox), the row ends with an Actions cell
// (the table's columns are then SANDBOX_COLUMNS and 'Actions').
export function sandboxRow(sb, actions = null) {
  const life = TERMINAL.includes(sb.state)
    ? h('span', {}, 'ended ', when(sb.ended_at))
    : h('span', {}, 'expires ', when(sb.expires_at));
  return h('tr', {dataset: {id: sb.id, state: sb.state}},
    cell('Sandbox', h('a', {href: href('sandboxes', sb.id), class: 'mono'}, sb.id)),
    cell('State', stateBadge(sb.state), sb.reason ? h('span', {class: 'reason'}, sb.reason) : null),
    cell('Owner', sb.owner ? h('a', {href: href('owners', sb.owner), class: 'nowrap'}, sb.owner) : h('span', {class: 'muted'}, '—')),
    cell('Provider', sb.provider),
    cell('Labels', labelsList(sb.labels)),
    cell('Created', when(sb.created_at)),
    cell('Lifetime', life),
    cell('Released', releasedText(sb)),
    typeof actions === 'function' ? cell('Actions', actions(sb)) : null);
}

// REASONS are the reasons a sandbox ends with (the list's reason filter).
const REASONS = ['requested', 'owner_released', 'owner_expired', 'expired', 'create_failed', 'lost', 'pause_failed', 'resume_failed', 'pool_deleted', 'pool_shrunk'];

export const SANDBOX_COLUMNS = ['Sandbox', 'State', 'Owner', 'Provider', 'Labels', 'Created', 'Lifetime', 'Released'];

// filterForm is the filters, kept in the URL; its provider list is filled
// in by setProviders when the providers arrive.
function filterForm(q, navigate) {
  const states = new Set((q.get('state') ?? '').split(',').filter(Boolean));
  const field = (id, label, input, help) => h('div', {class: 'field'}, h('label', {for: id}, label), input, help);
  const stateBoxes = h('fieldset', {class: 'states'}, h('legend', {}, 'State'),
    STATES.map((s) => h('label', {class: 'check'},
      h('input', {type: 'checkbox', name: 'state', value: s, checked: states.has(s)}), ' ', stateBadge(s))));
  const owner = h('input', {id: 'f-owner', name: 'owner', value: q.get('owner') ?? '', autocomplete: 'off'});
  const provider = h('select', {id: 'f-provider', name: 'provider'});
  const setProviders = (providers) => {
    const names = providers.map((p) => p.name);
    if (q.get('provider') && !names.includes(q.get('provider'))) names.push(q.get('provider'));
    fill(provider, h('option', {value: ''}, 'Any'),
      names.map((n) => h('option', {value: n, selected: q.get('provider') === n}, n)));
  };
  setProviders([]);
  const labels = h('input', {id: 'f-label', name: 'label', value: q.getAll('label').join(', '), autocomplete: 'off', placeholder: 'team=search, env=prod', 'aria-describedby': 'f-label-help'});
  const after = h('input', {id: 'f-after', name: 'created_after', type: 'datetime-local', value: isoToLocalInput(q.get('created_after'))});
  const before = h('input', {id: 'f-before', name: 'created_before', type: 'datetime-local', value: isoToLocalInput(q.get('created_before'))});
  const reason = h('select', {id: 'f-reason', name: 'reason'},
    [['', 'Any'], ...REASONS.map((r) => [r, r])].map(([v, t]) => h('option', {value: v, selected: (q.get('reason') ?? '') === v}, t)));
  const released = h('select', {id: 'f-released', name: 'released'},
    [['', 'Any'], ['true', 'Released'], ['false', 'Not released']].map(([v, t]) => h('option', {value: v, selected: (q.get('released') ?? '') === v}, t)));
  const limit = h('select', {id: 'f-limit', name: 'limit'},
    ['25', '50', '100', '200', '500'].map((v) => h('option', {value: v, selected: (q.get('limit') ?? '50') === v}, v)));
  const active = FILTERS.filter((f) => f !== 'limit' && f !== 'cursor' && q.get(f)).length;
  const form = h('form', {role: 'search', 'aria-label': 'Filter sandboxes'},
    stateBoxes,
    h('div', {class: 'fields'},
      field('f-owner', 'Owner', owner),
      field('f-provider', 'Provider', provider),
      field('f-label', 'Labels', labels, h('small', {id: 'f-label-help', class: 'help'}, 'key=value, comma-separated; all must match')),
      field('f-after', 'Created after', after),
      field('f-before', 'Created before', before),
      field('f-reason', 'Ended because', reason),
      field('f-released', 'Released', released),
      field('f-limit', 'Page size', limit)),
    h('div', {class: 'actions'},
      h('button', {type: 'submit'}, 'Apply filters'),
      h('a', {href: '#/sandboxes', class: 'button secondary'}, 'Clear')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const out = new URLSearchParams();
    const picked = [...form.querySelectorAll('input[name=state]:checked')].map((i) => i.value);
    if (picked.length) out.set('state', picked.join(','));
    if (owner.value.trim()) out.set('owner', owner.value.trim());
    if (provider.value) out.set('provider', provider.value);
    for (const l of labels.value.split(',').map((s) => s.trim()).filter(Boolean)) out.append('label', l);
    if (after.value) out.set('created_after', localInputToISO(after.value));
    if (before.value) out.set('created_before', localInputToISO(before.value));
    if (reason.value) out.set('reason', reason.value);
    if (released.value) out.set('released', released.value);
    if (limit.value !== '50') out.set('limit', limit.value);
    navigate('#/sandboxes' + (out.size ? '?' + out.toString() : ''));
  });
  // Open on wide screens, and wherever a filter is set.
  const open = active > 0 || matchMedia('(min-width: 721px)').matches;
  const el = h('details', {class: 'filters panel', open},
    h('summary', {}, active ? `Filters (${active} set)` : 'Filters'), form);
  return {el, setProviders};
}

export async function sandboxesView(main, _params, ctx) {
  const q = ctx.query;
  const summary = h('p', {class: 'summary', role: 'status'});
  const results = h('div', {id: 'results'}, loading('sandboxes'));
  const pager = h('nav', {class: 'pager', 'aria-label': 'Pages'});
  const filters = filterForm(q, ctx.navigate);
  fill(main,
    h('div', {class: 'title-row'},
      h('h1', {tabindex: '-1'}, 'Sandboxes'),
      h('a', {href: '#/sandboxes/new', class: 'button', id: 'new-sandbox'}, 'New sandbox')),
    filters.el,
    summary, results, pager);
  const providers = providerList(ctx.signal).then(filters.setProviders);

  const query = apiQuery(q);
  let shown = new Set();
  let inFlight = null;
  let again = false;
  // While an End is being confirmed, redraws wait: the row stays put under the pointer.
  const endClosed = () => { if (!confirming(results)) load(); };
  const actions = (sb) => endControl(sb, ctx, endClosed);

  async function load() {
    if (inFlight) {
      again = true;
      return inFlight;
    }
    if (confirming(results)) return;
    inFlight = (async () => {
      try {
        const page = await api('/v1/sandboxes', {query, signal: ctx.signal});
        const focusedId = document.activeElement?.closest?.('tr[data-id]')?.dataset.id;
        const previous = shown;
        shown = new Set(page.items.map((s) => s.id));
        const rows = page.items.map((sb) => {
          const row = sandboxRow(sb, actions);
          if (previous.size && !previous.has(sb.id)) highlight(row, 'fresh');
          return row;
        });
        fill(results, table('Sandboxes, newest first', [...SANDBOX_COLUMNS, 'Actions'], rows,
          {empty: 'No sandboxes match these filters.', className: 'sandboxes'}));
        if (focusedId) results.querySelector(`tr[data-id="${CSS.escape(focusedId)}"] a`)?.focus();
        const n = page.items.length;
        fill(summary, `${n} sandbox${n === 1 ? '' : 'es'} on this page, newest first.`,
          q.get('cursor') ? '' : ' Updates live.');
        fill(pager,
          q.get('cursor') ? h('a', {href: pageHash(q, null)}, '← First page') : null,
          page.next_cursor ? h('a', {href: pageHash(q, page.next_cursor), rel: 'next'}, 'Next page →') : null);
        ctx.clearFlash();
      } catch (err) {
        ctx.showError(err);
        notLoaded(results);
      }
    })();
    await inFlight;
    inFlight = null;
    if (again) {
      again = false;
      await load();
    }
  }

  // Events: update a row at once, then refetch the page (debounced), which
  // also brings in new sandboxes that match the filters.
  let timer = null;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(load, 300);
  };
  ctx.subscribe((e) => {
    const row = results.querySelector(`tr[data-id="${CSS.escape(e.sandbox_id)}"]`);
    if (row) highlight(row, 'changed');
    if (row || !q.get('cursor')) refresh();
  });
  ctx.onReconnect(refresh);
  ctx.onLeave(() => clearTimeout(timer));
  // A release is not an event: poll now and then for the Released column.
  ctx.every(10_000, () => { if (!document.hidden) load(); });
  await Promise.all([load(), providers]);
}

// highlight marks a row that just appeared or changed, for two seconds.
function highlight(row, kind) {
  row.classList.remove(kind);
  void row.offsetWidth; // restart the animation
  row.classList.add(kind);
  setTimeout(() => row.classList.remove(kind), 2000);
}

function pageHash(q, cursor) {
  const next = new URLSearchParams(q);
  if (cursor) next.set('cursor', cursor);
  else next.delete('cursor');
  return '#/sandboxes' + (next.size ? '?' + next.toString() : '');
}
