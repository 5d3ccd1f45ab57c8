// One sandbox: what it is, its timeline (requested → creating → ready →
// ended → released) drawn from its events, its owner's lease, its network
// rules, its preview URLs and snapshots, its activity (execs, processes and
// terminals, file transfers, port and preview traffic, egress connections),
// and the actions on it (pause, resume, end, running a command,
// a terminal).

import {api, pages, errorText, providerList} from '../api.js';
import {h, fill, href, stateBadge, when, countdown, labelsList, table, cell, section, dl, duration, localTime, TERMINAL, TRANSITIONING, badge, loading} from '../dom.js';
import {findOwner} from './owners.js';
import {endQuestion} from './sandboxes.js';
import {execSection} from './exec.js';
import {terminalSection} from './terminal.js';
import {previewsSection} from './previews.js';
import {snapshotsSection} from './snapshots.js';
import {networkSection} from './network.js';

const STAGES = ['requested', 'creating', 'ready', 'ended', 'released'];

// stages reduces a sandbox and its events to the five stages of its life,
// each done (with when, how long after the previous one, and why), skipped
// or not reached yet.
export function stages(sb, events) {
  const changed = events.filter((e) => e.from !== e.to);
  const first = (pred) => changed.find(pred);
  const requested = first((e) => e.from == null) ?? {at: sb.created_at};
  const creating = first((e) => e.to === 'creating');
  const ready = first((e) => e.to === 'ready');
  const ended = first((e) => TERMINAL.includes(e.to));
  const out = [
    {key: 'requested', name: 'requested', at: requested.at, event: requested},
    {key: 'creating', name: 'creating', at: creating?.at, event: creating},
    {key: 'ready', name: 'ready', at: ready?.at ?? sb.ready_at, event: ready},
    {key: 'ended', name: ended?.to ?? (TERMINAL.includes(sb.state) ? sb.state : 'ended'), at: ended?.at ?? sb.ended_at, event: ended, reason: ended?.reason ?? sb.reason},
    {key: 'released', name: 'released', at: sb.released_at},
  ];
  const endedIdx = 3;
  let prev = null;
  for (const [i, st] of out.entries()) {
    if (st.at) {
      st.status = 'done';
      st.since = prev ? new Date(st.at) - new Date(prev.at) : null;
      prev = st;
    } else {
      st.status = out[endedIdx].at && i < endedIdx ? 'skipped' : 'pending';
    }
  }
  const last = out.filter((s) => s.status === 'done').at(-1);
  if (last && last.key !== 'released') last.current = true;
  return out;
}

function actorText(e) {
  if (!e) return null;
  if (e.actor === 'client') return e.actor_key_name ? `client (key ${e.actor_key_name})` : 'client';
  return e.actor;
}

function stageStrip(list, sb) {
  // The bar: one segment per stage reached, as wide as the time spent in it
  // (the current one up to now).
  const done = list.filter((s) => s.status === 'done');
  const bar = h('div', {class: 'timebar', 'aria-hidden': 'true'});
  for (const [i, st] of done.entries()) {
    const end = done[i + 1]?.at ?? (st.key === 'released' ? st.at : new Date().toISOString());
    const ms = Math.max(0, new Date(end) - new Date(st.at));
    if (st.key === 'released') continue;
    const seg = h('span', {class: `seg seg-${st.key === 'ended' ? sb.state : st.key}`, title: `${st.name}: ${duration(ms)}`}, st.name);
    seg.style.flexGrow = String(Math.max(ms, 1));
    bar.append(seg);
  }
  const steps = h('ol', {class: 'stages'}, list.map((st) => h('li', {class: `stage stage-${st.status}${st.current ? ' stage-current' : ''}`, dataset: {stage: st.key}},
    h('span', {class: 'stage-dot', 'aria-hidden': 'true'}),
    h('span', {class: 'stage-name'}, st.key === 'ended' && st.status === 'done' ? stateBadge(st.name) : st.name),
    st.status === 'done'
      ? h('span', {class: 'stage-when'},
        h('time', {datetime: st.at, title: st.at}, localTime(st.at)),
        st.since != null ? h('span', {class: 'stage-since'}, ` +${duration(st.since)}`) : null)
      : h('span', {class: 'stage-when muted'}, st.status === 'skipped' ? 'skipped' : 'not yet'),
    st.reason ? h('span', {class: 'stage-reason'}, `reason: ${st.reason}`) : null,
    st.current && !TERMINAL.includes(sb.state) ? h('span', {class: 'stage-reason'}, sb.state === st.key ? 'now' : `now ${sb.state}`) : null,
    st.key === 'released' && st.status !== 'done' && sb.release_error ? h('span', {class: 'stage-reason error'}, `last release error: ${sb.release_error}`) : null)));
  return [bar, steps];
}

function eventList(events) {
  if (events.length === 0) return h('p', {class: 'empty'}, 'No events.');
  return h('ol', {class: 'events'}, events.map((e, i) => {
    const since = i > 0 ? new Date(e.at) - new Date(events[i - 1].at) : null;
    return h('li', {dataset: {to: e.to}},
      e.from === e.to ? h('span', {class: 'badge badge-info'}, e.reason ?? 'note') : stateBadge(e.to),
      ' ', h('time', {datetime: e.at, title: e.at}, localTime(e.at)),
      since != null ? h('span', {class: 'muted'}, ` +${duration(since)}`) : null,
      h('span', {class: 'event-meta'},
        e.from ? `${e.from} → ${e.to}` : `→ ${e.to}`,
        ` · by ${actorText(e)}`,
        e.reason ? ` · reason ${e.reason}` : ''),
      e.message ? h('span', {class: 'event-message'}, e.message) : null);
  }));
}

// PORT_KINDS are the activity of a port's traffic: with an API key (port),
// through a preview URL (preview) or an E2B sandbox host (e2b_host).
const PORT_KINDS = ['port', 'preview', 'e2b_host'];

// activityResult is an activity's outcome: its error, an exec's exit
// status, or the HTTP status a sandbox's app answered.
function activityResult(a) {
  if (a.kind === 'egress') return a.allowed ? badge('allowed', 'ok') : [badge('refused', 'bad'), a.error ? h('span', {class: 'muted'}, ` ${a.error}`) : null];
  const http = a.http_status != null ? `HTTP ${a.http_status}` : null;
  if (a.error) return [badge(a.error, 'bad'), http ? ` ${http}` : null];
  if (a.timed_out) return badge('timed out', 'bad');
  if (a.exit_code != null) return badge(`exit ${a.exit_code}`, a.exit_code === 0 ? 'ok' : 'bad');
  if (http) return badge(http, a.http_status < 400 ? 'ok' : 'bad');
  return badge('ok', 'ok');
}

function activityTable(items) {
  const rows = items.map((a) => {
    const what = PORT_KINDS.includes(a.kind) ? `:${a.port} ${a.request ?? ''}`
      : a.kind === 'egress' ? `${a.host ?? ''}${a.port ? `:${a.port}` : ''}${a.rule ? ` (rule ${a.rule})` : ''}`
        : a.command ?? a.input ?? a.signal ?? a.path ?? a.network ?? '';
    const by = a.kind === 'preview' && a.preview_id ? h('span', {}, 'preview ', h('code', {}, a.preview_id))
      : a.kind === 'e2b_host' ? 'E2B host (no key)' : a.key_name ?? '—';
    return h('tr', {dataset: {kind: a.kind}},
      cell('When', when(a.at)),
      cell('Kind', a.kind),
      cell('What', h('code', {class: 'wrap'}, what)),
      cell('Result', activityResult(a)),
      cell('Bytes', a.bytes ?? '—'),
      cell('Took', duration(a.duration_ms)),
      cell('Key', by));
  });
  return table('Activity, oldest first', ['When', 'Kind', 'What', 'Result', 'Bytes', 'Took', 'Key'], rows,
    {empty: 'No exec, file, port or network activity recorded.', className: 'activity'});
}

function leasePanel(sb, owner) {
  if (!sb.owner) {
    return [h('p', {}, 'No owner: the sandbox lives until its TTL.'),
      dl([['Expires', TERMINAL.includes(sb.state) ? when(sb.expires_at) : countdown(sb.expires_at, 'expired')]])];
  }
  const pairs = [['Owner', h('a', {href: href('owners', sb.owner)}, sb.owner)]];
  if (owner) {
    pairs.push(['Lease', owner.alive ? badge('alive', 'ok') : badge('lapsed', 'bad')]);
    pairs.push(['Lease lapses', countdown(owner.expires_at)]);
    pairs.push(["Owner's live sandboxes", String(owner.live_sandboxes)]);
  } else {
    pairs.push(['Lease', h('span', {class: 'muted'}, 'no lease on record')]);
  }
  pairs.push(['Sandbox TTL', TERMINAL.includes(sb.state) ? when(sb.expires_at) : countdown(sb.expires_at, 'expired')]);
  return [dl(pairs), h('p', {class: 'help'}, 'The sandbox ends when its owner’s lease lapses (plus at most one janitor interval) or at its TTL, whichever comes first.')];
}

// OPS are the state changes a sandbox page offers (actions on its other
// resources get sections of their own below the summary, as preview URLs
// and snapshots do): from the state each starts in, the
// in-flight state it shows while the provider works, and the state it ends in.
const OPS = {
  pause: {from: 'ready', during: 'pausing', to: 'paused', label: 'Pause', progress: 'Pausing…',
    help: 'Pausing stops the sandbox’s processes, keeping their memory and files; exec and files are refused until it is resumed. Its TTL and its owner’s lease keep running.'},
  resume: {from: 'paused', during: 'resuming', to: 'ready', label: 'Resume', progress: 'Resuming…',
    help: 'Resuming starts its processes again where they stopped.'},
};

// CREATING says what a sandbox on its way to ready is waiting for.
const CREATING = {requested: 'Requested: waiting for an executor…', creating: 'Creating…'};

// opControls draws the pause or resume the sandbox's state allows, or the
// progress of one under way (the sandbox pausing or resuming, or this
// page's request in flight), or of its creation.
function opControls(sb, provider, busy) {
  if (CREATING[sb.state]) {
    return [h('p', {class: 'progress', role: 'status', dataset: {op: 'create'}},
      h('span', {class: 'spinner', 'aria-hidden': 'true'}), CREATING[sb.state],
      h('span', {class: 'muted'}, ' gives up at ', countdown(sb.create_deadline, 'passed')))];
  }
  const during = Object.entries(OPS).find(([op, o]) => busy === op || sb.state === o.during);
  if (during) {
    const [op, o] = during;
    return [h('p', {class: 'progress', role: 'status', dataset: {op}},
      h('span', {class: 'spinner', 'aria-hidden': 'true'}), o.progress,
      sb.state === o.during ? h('span', {class: 'muted'}, ' started ', when(sb.updated_at)) : null)];
  }
  const out = [];
  for (const [op, o] of Object.entries(OPS)) {
    if (sb.state !== o.from) continue;
    out.push(h('button', {type: 'button', class: op === 'pause' ? 'secondary' : '', dataset: {op}, 'aria-describedby': 'op-help'}, o.label));
    const cannot = provider && !provider.capabilities?.pause;
    out.push(h('span', {class: 'help', id: 'op-help'}, o.help,
      cannot ? ` The ${sb.provider} provider does not report pausing: Tether will refuse.` : ''));
  }
  return out;
}

// endControls draws End for a live sandbox: the button, the question it
// asks first (asking), or the end under way.
function endControls(sb, busy, asking) {
  if (TERMINAL.includes(sb.state)) return [];
  if (busy === 'end') {
    return [h('p', {class: 'progress', role: 'status', dataset: {op: 'end'}}, h('span', {class: 'spinner', 'aria-hidden': 'true'}), 'Ending…')];
  }
  if (!asking) return [h('button', {type: 'button', class: 'danger', dataset: {op: 'end'}}, 'End sandbox')];
  return [h('span', {class: 'confirm', role: 'group', 'aria-label': 'End this sandbox?'},
    h('span', {class: 'help', id: 'end-question'}, endQuestion(sb)),
    h('button', {type: 'button', class: 'danger', dataset: {op: 'end-confirm'}, 'aria-describedby': 'end-question'}, 'Confirm end'),
    h('button', {type: 'button', class: 'secondary', dataset: {op: 'end-cancel'}}, 'Cancel'))];
}

// actionsPanel draws the actions the sandbox's state allows and the last
// refusal; a button's data-op names what it does (sandboxView's click
// handler runs it).
function actionsPanel(sb, provider, {busy, problem, asking}) {
  return [
    ...opControls(sb, provider, busy),
    ...endControls(sb, busy, asking),
    problem ? h('p', {class: 'error', role: 'alert', id: 'op-error'}, problem) : null,
  ];
}

export async function sandboxView(main, [id], ctx) {
  const title = h('h1', {tabindex: '-1'}, 'Sandbox ', h('span', {class: 'mono'}, id));
  const head = h('div', {class: 'head-state'});
  const actions = h('div', {class: 'page-actions', 'aria-label': 'Actions', role: 'group'});
  const facts = h('div', {}, loading());
  const lease = h('div', {}, loading());
  const timeline = h('div', {class: 'timeline'}, loading());
  const events = h('div', {}, loading());
  const activity = h('div', {}, loading());
  const more = h('div');
  const networkBox = h('div');
  const previewBox = h('div');
  const snapshotBox = h('div');
  const execBox = h('div');
  const terminalBox = h('div');
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/sandboxes'}, 'Sandboxes'), ' › ', h('span', {class: 'mono'}, id)),
    title, head, actions,
    section('Summary', facts),
    section('Run a command', execBox),
    section('Terminal', terminalBox),
    section('Lease', lease),
    section('Network', networkBox),
    section('Preview URLs', previewBox),
    section('Snapshots', snapshotBox),
    section('Timeline', timeline, h('h3', {}, 'Events'), events),
    section('Activity', activity, more));

  let sb;
  // What the actions show: the operation this page has in flight, why the
  // last one was refused, and whether End is asking for confirmation.
  const op = {busy: null, problem: '', asking: false};
  const providers = providerList(ctx.signal);
  providers.catch(() => {}); // handled where it is awaited; a left page's abort is no error
  let provider = null;
  // drawActions redraws the actions, keeping the keyboard focus on the
  // same action when it is still there.
  const drawActions = () => {
    const focused = actions.contains(document.activeElement) ? document.activeElement.dataset.op : null;
    fill(actions, actionsPanel(sb, provider, op));
    if (focused) actions.querySelector(`button[data-op="${focused}"]`)?.focus();
  };
  const loadNetwork = networkSection(networkBox, id, ctx);
  const loadPreviews = previewsSection(previewBox, id, ctx);
  const loadSnapshots = snapshotsSection(snapshotBox, id, ctx);
  const updateExec = execSection(execBox, id, ctx, () => loadActivity(true).catch(ctx.showError));
  const updateTerminal = terminalSection(terminalBox, id);
  const focusAction = (name) => (actions.querySelector(`button[data-op="${name}"]`) ?? actions.querySelector('button') ?? actions.querySelector('[role=alert]') ?? head).focus?.();

  // act pauses or resumes the sandbox, waiting (up to 30 s) for the
  // provider; a refusal shows the API's problem, or the provider's error
  // when the sandbox went back to where it was.
  async function act(name) {
    op.busy = name;
    op.problem = '';
    drawActions();
    try {
      const res = await api(`/v1/sandboxes/${encodeURIComponent(id)}/${name}`, {method: 'POST', query: {wait: '30s'}, signal: ctx.signal});
      if (res.state === OPS[name].from && res.error) op.problem = `${OPS[name].label} refused: ${res.error}`;
    } catch (err) {
      if (err?.name === 'AbortError') return;
      op.problem = errorText(err);
    } finally {
      op.busy = null;
    }
    await reload();
    focusAction(null);
  }

  // end ends the sandbox (DELETE /v1/sandboxes/{id}), once confirmed.
  async function end() {
    op.busy = 'end';
    op.asking = false;
    op.problem = '';
    drawActions();
    try {
      await api(`/v1/sandboxes/${encodeURIComponent(id)}`, {method: 'DELETE', signal: ctx.signal});
    } catch (err) {
      if (err?.name === 'AbortError') return;
      op.problem = errorText(err);
    } finally {
      op.busy = null;
    }
    await reload();
    focusAction(null);
  }

  actions.addEventListener('click', (ev) => {
    const name = ev.target.closest('button[data-op]')?.dataset.op;
    if (!name || !sb) return;
    if (OPS[name]) act(name);
    else if (name === 'end-confirm') end();
    else if (name === 'end' || name === 'end-cancel') {
      op.asking = name === 'end';
      drawActions();
      focusAction(name === 'end' ? 'end-confirm' : 'end');
    }
  });

  async function loadSandbox() {
    sb = await api(`/v1/sandboxes/${encodeURIComponent(id)}`, {signal: ctx.signal});
    const evs = await pages(`/v1/sandboxes/${encodeURIComponent(id)}/events`, {limit: 500}, {signal: ctx.signal});
    provider = (await providers).find((p) => p.name === sb.provider) ?? null;
    fill(head, stateBadge(sb.state), sb.reason ? h('span', {class: 'reason'}, `reason: ${sb.reason}`) : null);
    drawActions();
    fill(facts, dl([
      ['Provider', h('a', {href: '#/providers'}, sb.provider)],
      ['Owner', sb.owner ? h('a', {href: href('owners', sb.owner)}, sb.owner) : h('span', {class: 'muted'}, 'none')],
      ['Labels', labelsList(sb.labels)],
      ['Pool', sb.labels?.['tether.pool'] ? h('a', {href: href('pools', sb.labels['tether.pool'])}, sb.labels['tether.pool']) : null],
      ['Provider ID', sb.provider_id ? h('code', {}, sb.provider_id) : null],
      ['From snapshot', sb.from_snapshot ? h('code', {id: 'from-snapshot'}, sb.from_snapshot) : null],
      ['Work dir', sb.work_dir ? h('code', {}, sb.work_dir) : null],
      ['Create attempts', String(sb.attempts)],
      ['Error', sb.error ? h('span', {class: 'error'}, sb.error) : null],
      ['Release error', sb.release_error ? h('span', {class: 'error'}, sb.release_error) : null],
      ['Created', when(sb.created_at)],
      ['Create deadline', sb.state === 'requested' || sb.state === 'creating' ? countdown(sb.create_deadline, 'passed') : null],
      ['Ready', sb.ready_at ? when(sb.ready_at) : null],
      ['Paused', sb.state === 'paused' ? when(sb.updated_at) : null],
      ['Ended', sb.ended_at ? when(sb.ended_at) : null],
      ['Released', sb.released ? when(sb.released_at) : TERMINAL.includes(sb.state) ? badge('not yet', 'warn') : null],
    ]));
    fill(timeline, stageStrip(stages(sb, evs.items), sb));
    fill(events, eventList(evs.items));
    document.title = `${id} · Tether`;
  }

  async function loadLease() {
    const owner = sb.owner ? await findOwner(sb.owner, ctx.signal) : null;
    fill(lease, leasePanel(sb, owner));
  }

  let cursor;
  const items = [];
  async function loadActivity(reset) {
    if (reset) {
      cursor = undefined;
      items.length = 0;
    }
    const page = await api(`/v1/sandboxes/${encodeURIComponent(id)}/activity`, {query: {limit: 200, cursor}, signal: ctx.signal});
    items.push(...page.items);
    cursor = page.next_cursor ?? cursor;
    fill(activity, activityTable(items));
    fill(more, page.next_cursor
      ? h('button', {type: 'button', class: 'secondary', onclick: () => loadActivity(false).catch(ctx.showError)}, 'Load more activity')
      : null);
  }

  const reload = async () => {
    try {
      await loadSandbox();
      updateExec(sb, provider);
      updateTerminal(sb, provider);
      await Promise.all([loadLease(), loadNetwork(sb), loadPreviews(sb, provider), loadSnapshots(sb, provider), loadActivity(true)]);
    } catch (err) {
      ctx.showError(err);
    }
  };
  let timer;
  ctx.subscribe((e) => {
    if (e.sandbox_id !== id) return;
    clearTimeout(timer);
    timer = setTimeout(reload, 200);
  });
  ctx.onReconnect(() => { clearTimeout(timer); timer = setTimeout(reload, 200); });
  ctx.onLeave(() => { clearTimeout(timer); document.title = 'Tether console'; });
  // Releases and lease renewals are not events: poll for them.
  ctx.every(5000, () => {
    if (document.hidden || !sb) return;
    if (!(TERMINAL.includes(sb.state) && sb.released)) reload();
  });
  await loadSandbox();
  updateExec(sb, provider);
  updateTerminal(sb, provider);
  await Promise.all([loadLease(), loadNetwork(sb), loadPreviews(sb, provider), loadSnapshots(sb, provider), loadActivity(true)]);
}
