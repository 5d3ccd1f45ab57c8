// Creating a sandbox (POST /v1/sandboxes): provider, image (when the
// provider lists images), owner, TTL, labels and provider params. A create
// answers at once; the console then shows the new sandbox, which follows
// its way to ready live.

import {api, errorText, providerList} from '../api.js';
import {h, fill, loading} from '../dom.js';

const field = (id, label, input, help) => h('div', {class: 'field'}, h('label', {for: id}, label), input, help);

// parseLabels reads "k=v" pairs, one a line or comma-separated, into an
// object; it throws on a pair without "=". The API checks the keys.
export function parseLabels(text) {
  const out = {};
  for (const pair of text.split(/[\n,]/).map((s) => s.trim()).filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`label "${pair}" must look like key=value`);
    out[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim();
  }
  return out;
}

function providerOption(p) {
  const notes = [p.default ? 'default' : null, p.available ? null : `unavailable: ${p.reason ?? 'no reason given'}`].filter(Boolean);
  return h('option', {value: p.name, selected: p.default, disabled: !p.available},
    notes.length ? `${p.name} (${notes.join('; ')})` : p.name);
}

// body reads the form into a create's body, or throws what is wrong with it.
function body({provider, image, owner, ttl, labels, params}) {
  const out = {provider: provider.value};
  if (owner.value.trim()) out.owner = owner.value.trim();
  if (ttl.value.trim()) out.ttl_seconds = Number(ttl.value);
  const l = parseLabels(labels.value);
  if (Object.keys(l).length) out.labels = l;
  if (params.value.trim()) {
    try {
      out.params = JSON.parse(params.value);
    } catch (err) {
      throw new Error(`Params are not JSON: ${err.message}`);
    }
  }
  if (image.value) out.params = {...(out.params ?? {}), image: image.value};
  return out;
}

export async function createView(main, _params, ctx) {
  const box = h('div', {}, loading('providers'));
  fill(main,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/sandboxes'}, 'Sandboxes'), ' › ', 'New'),
    h('h1', {tabindex: '-1'}, 'New sandbox'),
    h('div', {class: 'panel'}, box));
  const providers = await providerList(ctx.signal);
  const byName = new Map(providers.map((p) => [p.name, p]));
  const els = {
    provider: h('select', {id: 'new-provider', name: 'provider', required: true}, providers.map(providerOption)),
    image: h('select', {id: 'new-image', name: 'image'}),
    owner: h('input', {id: 'new-owner', name: 'owner', autocomplete: 'off', spellcheck: 'false', maxlength: '128', placeholder: 'agent-42', value: ctx.query.get('owner') ?? '', 'aria-describedby': 'new-owner-help'}),
    ttl: h('input', {id: 'new-ttl', name: 'ttl_seconds', type: 'number', min: '1', step: '1', inputmode: 'numeric', placeholder: 'server default', 'aria-describedby': 'new-ttl-help'}),
    labels: h('textarea', {id: 'new-labels', name: 'labels', rows: '3', spellcheck: 'false', placeholder: 'team=search\ntask=index-build', 'aria-describedby': 'new-labels-help'}),
    params: h('textarea', {id: 'new-params', name: 'params', rows: '2', spellcheck: 'false', placeholder: '{}', 'aria-describedby': 'new-params-help'}),
  };
  const imageField = field('new-image', 'Image', els.image, h('small', {class: 'help'}, 'an image the operator registered (params.image)'));
  const showImages = () => {
    const images = byName.get(els.provider.value)?.images ?? [];
    imageField.hidden = images.length === 0;
    fill(els.image, h('option', {value: ''}, 'None: the provider’s own root'),
      images.map((img) => h('option', {value: img.name}, `${img.name} (${img.source})`)));
  };
  els.provider.addEventListener('change', showImages);
  showImages();
  const error = h('p', {class: 'error', role: 'alert', id: 'create-error'});
  const submit = h('button', {type: 'submit'}, 'Create sandbox');
  const form = h('form', {class: 'stack', 'aria-label': 'Create a sandbox'},
    h('div', {class: 'fields'},
      field('new-provider', 'Provider', els.provider),
      imageField,
      field('new-owner', 'Owner', els.owner, h('small', {class: 'help', id: 'new-owner-help'},
        'optional; the sandbox then lives while its owner’s lease does: a create starts one of DEFAULT_OWNER_TTL, which the owner renews (PUT /v1/owners/{owner}/lease)')),
      field('new-ttl', 'TTL (seconds)', els.ttl, h('small', {class: 'help', id: 'new-ttl-help'}, 'empty: DEFAULT_TTL; never past MAX_LIFETIME'))),
    field('new-labels', 'Labels', els.labels, h('small', {class: 'help', id: 'new-labels-help'}, 'key=value, one a line or comma-separated')),
    field('new-params', 'Params (JSON, optional)', els.params, h('small', {class: 'help', id: 'new-params-help'}, 'the provider’s options (docs/providers.md)')),
    h('div', {class: 'actions'}, submit),
    error);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    let req;
    try {
      req = body(els);
    } catch (err) {
      error.textContent = err.message;
      return;
    }
    submit.disabled = true;
    try {
      const sb = await api('/v1/sandboxes', {method: 'POST', body: req});
      ctx.navigate(`#/sandboxes/${encodeURIComponent(sb.id)}`);
    } catch (err) {
      if (err?.name === 'AbortError') return;
      error.textContent = errorText(err);
      submit.disabled = false;
      submit.focus();
    }
  });
  if (providers.length === 0) error.textContent = 'The providers could not be read: a create names the server’s default.';
  fill(box, form);
}
