// API keys of the tenant: list, create (the secret shown once), revoke.

import {api} from '../api.js';
import {h, fill, when, table, cell, section, badge, loading} from '../dom.js';

export async function keysView(main, _params, ctx) {
  const list = h('div', {}, loading('keys'));
  const created = h('div', {class: 'created', role: 'status', 'aria-live': 'polite'});
  const name = h('input', {id: 'key-name', name: 'name', required: true, maxlength: '100', autocomplete: 'off', placeholder: 'ci-runner'});
  const formError = h('p', {class: 'error', role: 'alert'});
  const createButton = h('button', {type: 'submit'}, 'Create key');
  const form = h('form', {class: 'inline', 'aria-label': 'Create an API key'},
    h('div', {class: 'field'}, h('label', {for: 'key-name'}, 'Name'), name),
    h('div', {class: 'actions'}, createButton),
    formError);
  fill(main,
    h('h1', {tabindex: '-1'}, 'API keys'),
    h('p', {class: 'help'}, 'Keys of this tenant. A revoked key is refused within the server’s AUTH_CACHE_TTL (10 s by default); revoking the key you are signed in with signs you out then.'),
    section('Create a key', form, created),
    section('Keys', list));

  async function load() {
    const {items} = await api('/v1/keys', {signal: ctx.signal});
    const rows = items.map((k) => {
      const actions = h('div', {class: 'row-actions'});
      const revoke = h('button', {type: 'button', class: 'danger', 'aria-label': `Revoke key ${k.name}`}, 'Revoke');
      revoke.addEventListener('click', () => {
        const confirm = h('button', {type: 'button', class: 'danger', 'aria-label': `Confirm: revoke key ${k.name}`}, 'Confirm revoke');
        const cancel = h('button', {type: 'button', class: 'secondary'}, 'Cancel');
        cancel.addEventListener('click', () => { fill(actions, revoke); revoke.focus(); });
        confirm.addEventListener('click', async () => {
          confirm.disabled = true;
          try {
            await api(`/v1/keys/${encodeURIComponent(k.id)}`, {method: 'DELETE'});
            await load();
            const heading = list.closest('section').querySelector('h2');
            heading.tabIndex = -1;
            heading.focus();
          } catch (err) {
            confirm.disabled = false;
            ctx.showError(err);
          }
        });
        fill(actions, confirm, cancel);
        confirm.focus();
      });
      if (!k.revoked_at) actions.append(revoke);
      return h('tr', {dataset: {key: k.id, name: k.name}},
        cell('Name', k.name),
        cell('ID', h('code', {}, k.id)),
        cell('Status', k.revoked_at ? h('span', {}, badge('revoked', 'bad'), ' ', when(k.revoked_at)) : badge('active', 'ok')),
        cell('Created', when(k.created_at)),
        cell('Last used', when(k.last_used_at)),
        cell('Actions', actions));
    });
    fill(list, table('API keys, oldest first', ['Name', 'ID', 'Status', 'Created', 'Last used', 'Actions'], rows, {empty: 'No keys.', className: 'keys'}));
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    formError.textContent = '';
    createButton.disabled = true;
    try {
      const res = await api('/v1/keys', {method: 'POST', body: {name: name.value}});
      const secret = h('code', {class: 'secret', id: 'new-secret'}, res.secret);
      const copy = h('button', {type: 'button', class: 'secondary'}, 'Copy');
      copy.addEventListener('click', async () => {
        try {
          await navigator.clipboard.writeText(res.secret);
          copy.textContent = 'Copied';
        } catch {
          getSelection().selectAllChildren(secret);
          copy.textContent = 'Selected: press Ctrl+C';
        }
      });
      const done = h('button', {type: 'button'}, 'I have stored it');
      done.addEventListener('click', () => { created.replaceChildren(); name.focus(); });
      fill(created, h('div', {class: 'panel notice'},
        h('p', {}, h('strong', {}, `Key “${res.key.name}” created (${res.key.id}).`), ' Its secret is shown this once: Tether keeps only its hash.'),
        h('p', {class: 'secret-row'}, h('span', {class: 'muted'}, 'Secret'), ' ', secret, ' ', copy),
        done));
      name.value = '';
      await load();
      copy.focus();
    } catch (err) {
      formError.textContent = err.detail ?? String(err);
    } finally {
      createButton.disabled = false;
    }
  });
  await load();
}
