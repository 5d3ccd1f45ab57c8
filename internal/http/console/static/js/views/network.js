// A sandbox's way out: its network mode and, for an allow-list sandbox,
// what it may reach (its own entries and its named policies'), the
// credentials Tether's egress proxy adds (secrets by name only) and until
// when, and a form that replaces its allow list while it runs (PATCH
// /v1/sandboxes/{id}/network). The section lives on the sandbox page
// (sandbox.js); the connections themselves are in its activity (kind
// egress).

import {api, errorText} from '../api.js';
import {h, fill, dl, table, cell, badge, countdown, when, loading, TERMINAL} from '../dom.js';

// parseEntries reads the form's allow list: one entry a line, blank lines
// and surrounding spaces dropped.
export function parseEntries(text) {
  return text.split('\n').map((s) => s.trim()).filter((s) => s !== '');
}

function credentialsTable(creds) {
  const rows = creds.map((c) => h('tr', {dataset: {host: c.host}},
    cell('Host', h('code', {}, c.host)),
    cell('Header', c.username ? `Authorization (basic, user ${c.username})` : c.header ?? 'Authorization'),
    cell('Value', h('code', {}, c.format ?? '{secret}')),
    cell('Secret', h('code', {}, c.secret))));
  return table('Credentials the egress proxy adds', ['Host', 'Header', 'Value', 'Secret'], rows,
    {empty: 'No credentials.', className: 'credentials'});
}

// networkSection draws the section's content into box and returns
// load(sb), which redraws it for the sandbox as it is now.
export function networkSection(box, id, ctx) {
  const path = `/v1/sandboxes/${encodeURIComponent(id)}/network`;
  const facts = h('div', {id: 'network'}, loading());
  const entries = h('textarea', {id: 'network-allow', name: 'allow', rows: '5', spellcheck: 'false', 'aria-describedby': 'network-allow-help'});
  const error = h('p', {class: 'error', role: 'alert', id: 'network-error'});
  const saved = h('p', {class: 'muted', role: 'status', 'aria-live': 'polite', id: 'network-saved'});
  const submit = h('button', {type: 'submit'}, 'Save allow list');
  const form = h('form', {class: 'stack', 'aria-label': 'Change the allow list'},
    h('div', {class: 'field'}, h('label', {for: 'network-allow'}, 'Allow list'), entries,
      h('small', {class: 'help', id: 'network-allow-help'},
        'One entry a line: a host name (pypi.org), a wildcard (*.pythonhosted.org: the names below it), an IPv4 or IPv6 address or CIDR, each with an optional :port. In force within a second; connections already open go on.')),
    h('div', {class: 'actions'}, submit), error, saved);
  fill(box, facts);

  let sb = null;
  let editing = false; // the textarea is not redrawn under a user typing in it
  entries.addEventListener('input', () => { editing = true; });

  async function load(s = sb) {
    sb = s;
    const net = await api(path, {signal: ctx.signal});
    if (net.network !== 'allowlist') {
      fill(box, h('p', {id: 'network'}, net.network === 'host'
        ? 'The host’s network: the sandbox reaches whatever the host does.'
        : 'No network: the sandbox reaches nothing outside itself (create it with params.network "allowlist" to open a way out).'));
      return;
    }
    const missing = new Set(net.missing_policies);
    const live = !TERMINAL.includes(sb.state);
    fill(facts, dl([
      ['Mode', badge('allow list', 'info')],
      ['Allows', net.allow.length ? h('ul', {class: 'plain', id: 'network-entries'}, net.allow.map((e) => h('li', {}, h('code', {}, e)))) : h('span', {class: 'muted'}, 'nothing of its own')],
      ['Policies', net.policies.length ? h('ul', {class: 'plain', id: 'network-policies'}, net.policies.map((p) => h('li', {dataset: {policy: p}}, h('code', {}, p),
        missing.has(p) ? [' ', badge('missing', 'warn')] : null))) : h('span', {class: 'muted'}, 'none')],
      ['Credentials work until', net.credentials.length ? (sb.state === 'ready' ? countdown(net.credentials_until, 'lapsed') : h('span', {class: 'muted'}, `not while ${sb.state}`)) : null],
      ['Rules', net.edited ? ['edited ', when(net.updated_at)] : 'as created'],
    ]), net.credentials.length ? credentialsTable(net.credentials) : null);
    if (!live) {
      fill(box, facts);
      return;
    }
    if (!editing) entries.value = net.allow.join('\n');
    if (!box.contains(form)) fill(box, facts, h('h3', {}, 'Change the allow list'), form);
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    saved.textContent = '';
    submit.disabled = true;
    try {
      await api(path, {method: 'PATCH', body: {allow: parseEntries(entries.value)}, signal: ctx.signal});
      editing = false;
      saved.textContent = 'Saved: in force within a second.';
      await load();
    } catch (err) {
      if (err?.name === 'AbortError') return;
      error.textContent = errorText(err);
      entries.focus();
    } finally {
      submit.disabled = false;
    }
  });
  return load;
}
