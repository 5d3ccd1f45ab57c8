// Browser tests of the web console (/ui), in Debian's Chromium driven by
// playwright-core, against a real Tether and Postgres. test/e2e's
// TestConsole starts Tether and runs them with:
//
//   TETHER_URL            the Tether under test
//   TETHER_API_KEY        a key of tenant A
//   TETHER_OTHER_API_KEY  a key of tenant B
//   TETHER_SIM_STATE_DIR  the sim provider's inventory (to lose and orphan resources)
//
// and WEBHOOK_ALLOW_PRIVATE=true, so that a webhook endpoint may be this
// test's own loopback receiver, with WEBHOOK_RETRY_FOR=3s (a receiver that
// keeps failing makes its endpoint failing within seconds).
//   CHROMIUM_PATH         default /usr/bin/chromium
//   UPDATE_SCREENSHOTS=1  save the screenshots to docs/console/
//
// The server runs with AUTH_CACHE_TTL=1s, so that a revoked key is refused
// within a second.

import {test, before, after} from 'node:test';
import assert from 'node:assert/strict';
import {mkdtemp, rm, utimes, writeFile, mkdir, readFile, readdir} from 'node:fs/promises';
import {tmpdir} from 'node:os';
import {join, relative, sep} from 'node:path';
import {fileURLToPath} from 'node:url';
import {createServer} from 'node:http';
import {createHmac} from 'node:crypto';
import {chromium} from 'playwright-core';

const BASE = process.env.TETHER_URL;
const KEY = process.env.TETHER_API_KEY;
const OTHER = process.env.TETHER_OTHER_API_KEY;
const SIM_DIR = process.env.TETHER_SIM_STATE_DIR;
for (const [name, v] of Object.entries({TETHER_URL: BASE, TETHER_API_KEY: KEY, TETHER_OTHER_API_KEY: OTHER, TETHER_SIM_STATE_DIR: SIM_DIR})) {
  if (!v) throw new Error(`${name} is not set: run these tests with go test ./test/e2e -run Console`);
}
const RUN = Date.now().toString(36);
const SHOTS = process.env.UPDATE_SCREENSHOTS === '1'
  ? fileURLToPath(new URL('../../docs/console/', import.meta.url))
  : null;

// The flags Debian's Chromium needs here: without the background-networking
// ones, its own connections are refused and slow it down.
const LAUNCH = {
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
};

let browser;
before(async () => { browser = await chromium.launch(LAUNCH); });
after(async () => { await browser?.close(); });

// --- the API, from the test's side -------------------------------------------

async function call(method, path, {body, key = KEY, raw} = {}) {
  const resp = await fetch(BASE + path, {
    method,
    headers: {Authorization: `Bearer ${key}`, ...(body !== undefined && !raw ? {'Content-Type': 'application/json'} : {})},
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  return {status: resp.status, json, headers: resp.headers};
}

async function ok(method, path, opts) {
  const r = await call(method, path, opts);
  assert.ok(r.status >= 200 && r.status < 300, `${method} ${path}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

const create = (body, key = KEY) => ok('POST', '/v1/sandboxes', {body, key});
const settled = (id, key = KEY) => ok('GET', `/v1/sandboxes/${id}?wait=30s`, {key});
const released = (id, key = KEY) => ok('GET', `/v1/sandboxes/${id}?until=released&wait=60s`, {key});

async function until(what, fn, timeout = 20000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// --- the browser ----------------------------------------------------------------

// open makes a fresh browser context (its own sessionStorage) and a page that
// records script errors and CSP violations; done() fails on any.
async function open({viewport = {width: 1280, height: 800}, ...opts} = {}) {
  const context = await browser.newContext({viewport, timezoneId: 'UTC', reducedMotion: 'reduce', ...opts});
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const errors = [];
  page.networkChanges = 0;
  page.on('requestfailed', (req) => { if (req.failure()?.errorText === 'net::ERR_NETWORK_CHANGED') page.networkChanges++; });
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    // A failed API call (401, 404) is logged by Chromium; that is expected.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) errors.push(`console: ${msg.text()}`);
  });
  return {
    page,
    errors,
    async done() {
      await context.close();
      assert.deepEqual(errors, [], 'the page had script errors or CSP violations');
    },
  };
}

// load navigates (goto or reload) and waits for the console to start. When
// the local provider makes a sandbox, Chromium may see the host's network
// change and abort the requests in flight (net::ERR_NETWORK_CHANGED), a
// module's among them; only then is the load tried again.
async function load(page, navigate) {
  for (let attempt = 1; ; attempt++) {
    const seen = page.networkChanges;
    await navigate();
    try {
      await page.locator('main > :not(noscript)').first().waitFor({timeout: 5000});
      return;
    } catch (err) {
      if (page.networkChanges === seen || attempt === 3) throw err;
    }
  }
}

async function signIn(page, key = KEY) {
  await load(page, () => page.goto(`${BASE}/ui/`));
  await page.locator('#apikey').fill(key);
  await page.getByRole('button', {name: 'Sign in'}).click();
  await page.locator('#nav').waitFor({state: 'visible'});
  await page.locator('main h1', {hasText: 'Sandboxes'}).waitFor();
}

async function go(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}

const rowIds = (page, scope = '#results') => page.$$eval(`${scope} tbody tr[data-id]`, (trs) => trs.map((t) => t.dataset.id));

// wantRows waits until the sandboxes table shows exactly want.
async function wantRows(page, want, scope = '#results') {
  const sorted = [...want].sort();
  try {
    await page.waitForFunction(([w, s]) => {
      const wrap = document.querySelector(`${s} .table-wrap`);
      const got = [...document.querySelectorAll(`${s} tbody tr[data-id]`)].map((t) => t.dataset.id).sort();
      return wrap && JSON.stringify(got) === JSON.stringify(w);
    }, [sorted, scope], {timeout: 10000});
  } catch {
    assert.deepEqual((await rowIds(page, scope)).sort(), sorted, 'the rows of the sandboxes table');
  }
}

async function openFilters(page) {
  const details = page.locator('details.filters');
  if (!(await details.evaluate((d) => d.open))) await details.locator('summary').click();
}

async function applyFilters(page, set) {
  await openFilters(page);
  const form = page.locator('form[role=search]');
  for (const box of await form.locator('input[name=state]').all()) await box.setChecked((set.state ?? []).includes(await box.inputValue()));
  await form.getByLabel('Owner').fill(set.owner ?? '');
  await form.getByLabel('Provider').selectOption(set.provider ?? '');
  await form.getByLabel('Labels').fill(set.labels ?? '');
  await form.getByLabel('Created after').fill(set.created_after ?? '');
  await form.getByLabel('Created before').fill(set.created_before ?? '');
  await form.getByLabel('Ended because').selectOption(set.reason ?? '');
  await form.getByLabel('Released').selectOption(set.released ?? '');
  await form.getByRole('button', {name: 'Apply filters'}).click();
}

// noOverflow checks that a page fits its viewport's width.
// (Not innerWidth: on a phone the browser widens the layout viewport to fit
// content that overflows.)
async function noOverflow(page, what) {
  const width = page.viewportSize().width;
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, innerWidth]);
  assert.ok(scroll <= width && inner <= width, `${what}: the page is ${scroll}px wide (layout viewport ${inner}px) on a ${width}px screen`);
}

// --- the tests ------------------------------------------------------------------

test('/ui is served with a strict CSP and no authentication', async () => {
  const resp = await fetch(`${BASE}/ui/`);
  assert.equal(resp.status, 200);
  const csp = resp.headers.get('content-security-policy') ?? '';
  assert.match(csp, /default-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(resp.headers.get('x-content-type-options'), 'nosniff');
  const js = await fetch(`${BASE}/ui/js/app.js`);
  assert.equal(js.headers.get('content-type'), 'text/javascript; charset=utf-8');
  assert.equal((await fetch(`${BASE}/ui/nope.js`)).status, 404);
  // The API itself still needs a key.
  assert.equal((await fetch(`${BASE}/v1/sandboxes`)).status, 401);
});

test('the vendored packages (xterm.js) are served as npm ships them, at the pinned versions', async () => {
  // TestConsole installs internal/http/console's package-lock.json (npm ci)
  // before these tests: every file under static/vendor is served as that
  // package's own file, byte for byte.
  const dir = fileURLToPath(new URL('../../internal/http/console/', import.meta.url));
  const pins = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')).dependencies;
  const vendor = join(dir, 'static', 'vendor');
  const files = (await readdir(vendor, {recursive: true, withFileTypes: true})).filter((d) => d.isFile());
  const seen = new Set();
  for (const d of files) {
    const rel = relative(vendor, join(d.parentPath ?? d.path, d.name)).split(sep).join('/');
    const parts = rel.split('/');
    const pkg = parts.slice(0, rel.startsWith('@') ? 2 : 1).join('/');
    assert.ok(pins[pkg], `static/vendor/${rel} belongs to no pinned package`);
    seen.add(pkg);
    const installed = JSON.parse(await readFile(join(dir, 'node_modules', pkg, 'package.json'), 'utf8'));
    assert.equal(installed.version, pins[pkg], `node_modules has ${pkg} ${installed.version}`);
    const resp = await fetch(`${BASE}/ui/vendor/${rel}`);
    assert.equal(resp.status, 200, `/ui/vendor/${rel}`);
    const served = Buffer.from(await resp.arrayBuffer());
    assert.ok(served.equals(await readFile(join(dir, 'node_modules', rel))), `/ui/vendor/${rel} is not ${pkg}'s file`);
  }
  assert.deepEqual([...seen].sort(), Object.keys(pins).sort(), 'a pinned package is not vendored');
});

test('sign in: a wrong key is refused with the API\'s message; a good one is kept for the tab', async () => {
  const {page, done} = await open();
  await load(page, () => page.goto(`${BASE}/ui/`));
  await page.locator('#apikey').fill('not-a-key');
  await page.getByRole('button', {name: 'Sign in'}).click();
  await page.locator('#signin-error', {hasText: 'the API key is not valid'}).waitFor();
  assert.equal(await page.locator('#nav').isVisible(), false, 'the console is shown without a valid key');

  await page.locator('#apikey').fill(KEY);
  await page.getByRole('button', {name: 'Sign in'}).click();
  await page.locator('main h1', {hasText: 'Sandboxes'}).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.apiKey')), KEY);
  await page.locator('#live[data-status=live]').waitFor();

  await load(page, () => page.reload());
  await page.locator('main h1', {hasText: 'Sandboxes'}).waitFor();

  await page.getByRole('button', {name: 'Sign out'}).click();
  await page.locator('#apikey').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.apiKey')), null);
  await done();
});

test('the stream parser and resume: SSE split anywhere, Last-Event-ID picks up after a gap', async () => {
  const {page, done} = await open();
  await signIn(page);
  // The parser, fed a stream cut at awkward places (inside \r\n, mid-field).
  const parsed = await page.evaluate(async () => {
    const {SSEParser} = await import('./js/sse.js');
    const out = [];
    const p = new SSEParser((e) => out.push(e));
    for (const chunk of ['id: 7-1\r', '\nevent: event\r\ndata: {"a":', '1}\r\n\r\n: keep-alive\n\n', 'data: x\ndata: y\n', '\nid: 8-2\nevent: error\ndata: {}\n\n']) p.push(chunk);
    return out;
  });
  assert.deepEqual(parsed, [
    {type: 'event', data: '{"a":1}', id: '7-1'},
    {type: 'message', data: 'x\ny', id: '7-1'},
    {type: 'error', data: '{}', id: '8-2'},
  ]);

  // Follow the stream until a new sandbox is requested, stop, let it become
  // ready meanwhile, and resume from the last id: the rest of its history
  // arrives, and nothing twice.
  await page.evaluate(async (key) => {
    const {EventStream} = await import('./js/sse.js');
    window.got = [];
    window.first = new EventStream({key, onEvent: (e) => window.got.push(e)});
    window.first.start();
  }, KEY);
  await page.waitForFunction(() => document.getElementById('live').dataset.status === 'live');
  await page.waitForTimeout(300); // the new stream is open
  const sb = await create({provider: 'sim', labels: {suite: `stream-${RUN}`}, params: {create_delay_ms: 1500}});
  await page.waitForFunction((id) => window.got.some((e) => e.sandbox_id === id), sb.id);
  const lastId = await page.evaluate(() => { window.first.stop(); return window.first.lastId; });
  assert.match(lastId, /^\d+-\d+$/);
  await settled(sb.id);
  const resumed = await page.evaluate(async ([key, last, id]) => {
    const {EventStream} = await import('./js/sse.js');
    const seen = [];
    const s = new EventStream({key, onEvent: (e) => { if (e.sandbox_id === id) seen.push(e.to); }});
    s.lastId = last;
    s.start();
    const deadline = Date.now() + 10000;
    while (!seen.includes('ready') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    s.stop();
    return {seen, before: window.got.filter((e) => e.sandbox_id === id).map((e) => e.to)};
  }, [KEY, lastId, sb.id]);
  assert.deepEqual([...resumed.before, ...resumed.seen], ['requested', 'creating', 'ready']);
  await done();
});

test('the sandboxes table applies every filter of the API', async () => {
  const suite = `filters-${RUN}`;
  const owner = `owner-${RUN}`;
  const a = await create({provider: 'sim', owner, labels: {suite, team: 'search'}});
  const b = await create({provider: 'sim', labels: {suite, team: 'ml'}, params: {fail: 'create'}});
  const c = await create({provider: 'sim', labels: {suite, team: 'search'}});
  const d = await create({provider: 'local', labels: {suite, team: 'infra'}});
  for (const s of [a, b, c, d]) await settled(s.id);
  await ok('DELETE', `/v1/sandboxes/${c.id}`);
  await released(b.id);
  await released(c.id);

  const {page, done} = await open();
  await signIn(page);
  const all = [a.id, b.id, c.id, d.id];
  await applyFilters(page, {labels: `suite=${suite}`});
  await wantRows(page, all);
  await applyFilters(page, {labels: `suite=${suite}, team=search`});
  await wantRows(page, [a.id, c.id]);
  await applyFilters(page, {labels: `suite=${suite}`, state: ['failed']});
  await wantRows(page, [b.id]);
  await applyFilters(page, {labels: `suite=${suite}`, state: ['ready', 'failed']});
  await wantRows(page, [a.id, b.id, d.id]);
  await applyFilters(page, {owner});
  await wantRows(page, [a.id]);
  await applyFilters(page, {labels: `suite=${suite}`, provider: 'local'});
  await wantRows(page, [d.id]);
  await applyFilters(page, {labels: `suite=${suite}`, released: 'true'});
  await wantRows(page, [b.id, c.id]);
  await applyFilters(page, {labels: `suite=${suite}`, released: 'false'});
  await wantRows(page, [a.id, d.id]);
  await applyFilters(page, {labels: `suite=${suite}`, reason: 'create_failed'});
  await wantRows(page, [b.id]);
  await applyFilters(page, {labels: `suite=${suite}`, reason: 'requested'});
  await wantRows(page, [c.id]);
  const minute = (ms) => new Date(Date.now() + ms).toISOString().slice(0, 16); // the browser runs in UTC
  await applyFilters(page, {labels: `suite=${suite}`, created_after: minute(60_000)});
  await wantRows(page, []);
  await page.locator('#results .empty', {hasText: 'No sandboxes match'}).waitFor();
  await applyFilters(page, {labels: `suite=${suite}`, created_after: minute(-120_000), created_before: minute(60_000)});
  await wantRows(page, all);
  await applyFilters(page, {labels: `suite=${suite}`, created_before: minute(-120_000)});
  await wantRows(page, []);

  // The filters live in the URL: a reload shows the same rows.
  await applyFilters(page, {labels: `suite=${suite}, team=search`});
  await wantRows(page, [a.id, c.id]);
  await load(page, () => page.reload());
  await wantRows(page, [a.id, c.id]);
  assert.equal(await page.locator('form[role=search]').getByLabel('Labels').inputValue(), `suite=${suite}, team=search`);

  // Pages: limit and cursor.
  await go(page, `#/sandboxes?label=${encodeURIComponent(`suite=${suite}`)}&limit=3`);
  await wantRows(page, [d.id, c.id, b.id]);
  await page.getByRole('link', {name: 'Next page →'}).click();
  await wantRows(page, [a.id]);
  await page.getByRole('link', {name: '← First page'}).waitFor();

  // A filter the API refuses shows the API's problem detail.
  await applyFilters(page, {labels: 'nonsense'});
  await page.locator('#flash', {hasText: 'label filter "nonsense" must look like key=value'}).waitFor();
  await done();
});

test('a sandbox appears and goes ready in the table without a reload', async () => {
  const suite = `live-${RUN}`;
  const {page, done} = await open();
  await signIn(page);
  await page.locator('#live[data-status=live]').waitFor();
  await page.evaluate(() => { window.notReloaded = true; });
  const seen = [];
  await page.exposeFunction('sawState', (s) => seen.push(s));
  const sb = await create({provider: 'sim', labels: {suite}, params: {create_delay_ms: 2500}});
  // Record each state the row shows, as the page shows it.
  await page.evaluate((id) => {
    let last = '';
    const look = () => {
      const s = document.querySelector(`#results tr[data-id="${id}"]`)?.dataset.state ?? '';
      if (s && s !== last) { last = s; window.sawState(s); }
    };
    new MutationObserver(look).observe(document.getElementById('main'), {subtree: true, childList: true, attributes: true});
    look();
  }, sb.id);
  await page.locator(`#results tr[data-id="${sb.id}"][data-state=ready]`).waitFor({timeout: 20000});
  await page.locator(`#results tr[data-id="${sb.id}"] .state`, {hasText: 'ready'}).waitFor();
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page was reloaded');
  assert.equal(await page.evaluate(() => performance.getEntriesByType('navigation').length), 1);
  assert.ok(seen.length >= 2 && seen.at(-1) === 'ready' && ['requested', 'creating'].includes(seen[0]),
    `the row should show the sandbox before it is ready, then ready; it showed ${JSON.stringify(seen)}`);
  await done();
});

test('a sandbox page draws its timeline, lease and activity, and follows it live', async () => {
  const owner = `agent-${RUN}`;
  const sb = await create({provider: 'local', owner, labels: {suite: `page-${RUN}`}});
  const ready = await settled(sb.id);
  assert.equal(ready.state, 'ready');
  const exec = await ok('POST', `/v1/sandboxes/${sb.id}/exec`, {body: {command: 'echo console-was-here'}});
  assert.equal(exec.exit_code, 0);
  await ok('PUT', `/v1/sandboxes/${sb.id}/files?path=${encodeURIComponent('/workspace/notes.txt')}`, {raw: 'hello'});
  await ok('PUT', `/v1/owners/${owner}/lease`, {body: {ttl_seconds: 90}});

  const {page, done} = await open();
  await signIn(page);
  await page.locator(`#results a[href="#/sandboxes/${sb.id}"]`).click();
  await page.locator('main h1', {hasText: sb.id}).waitFor();

  // While it is ready: three stages done, the rest to come; the lease counts down.
  await page.locator('.stage[data-stage=ready].stage-done.stage-current').waitFor();
  assert.equal(await page.locator('.stage[data-stage=ended]').getAttribute('class'), 'stage stage-pending');
  const lease = page.locator('[aria-labelledby=sec-lease] time[data-countdown]').first();
  const before = await lease.textContent();
  assert.match(before, /^\d+:\d\d left$/);
  await page.waitForFunction((b) => {
    const t = document.querySelector('[aria-labelledby=sec-lease] time[data-countdown]');
    return t && t.textContent !== b;
  }, before, {timeout: 5000});
  assert.equal(await page.locator('[aria-labelledby=sec-lease] a', {hasText: owner}).count(), 1);

  // Activity: the exec and the file write, with who and how it ended.
  const activity = page.locator('[aria-labelledby=sec-activity] tbody tr');
  await page.locator('[aria-labelledby=sec-activity] tr[data-kind=exec]', {hasText: 'echo console-was-here'}).waitFor();
  assert.match(await page.locator('[aria-labelledby=sec-activity] tr[data-kind=exec]').textContent(), /exit 0/);
  assert.match(await page.locator('[aria-labelledby=sec-activity] tr[data-kind=file_write]').textContent(), /\/workspace\/notes\.txt/);
  assert.equal(await activity.count(), 2);

  // Ended through the API: the page follows, to released, without a reload.
  await page.evaluate(() => { window.notReloaded = true; });
  await ok('DELETE', `/v1/sandboxes/${sb.id}`);
  await page.locator('.stage[data-stage=ended].stage-done', {hasText: 'terminated'}).waitFor();
  await page.locator('.stage[data-stage=released].stage-done').waitFor({timeout: 20000});
  assert.equal(await page.evaluate(() => window.notReloaded), true);
  for (const stage of ['requested', 'creating', 'ready', 'ended', 'released']) {
    assert.match(await page.locator(`.stage[data-stage=${stage}]`).getAttribute('class'), /stage-done/, stage);
  }
  for (const stage of ['creating', 'ready', 'ended', 'released']) {
    assert.match(await page.locator(`.stage[data-stage=${stage}] .stage-since`).textContent(), /^ \+\d/, `${stage} shows how long after the previous stage`);
  }
  assert.match(await page.locator('.stage[data-stage=ended]').textContent(), /reason: requested/);
  assert.deepEqual(await page.$$eval('ol.events > li', (lis) => lis.map((li) => li.dataset.to)), ['requested', 'creating', 'ready', 'terminated']);
  assert.match(await page.locator('ol.events > li').last().textContent(), /by client \(key bootstrap\)/);
  assert.ok(await page.locator('.timebar .seg').count() >= 3, 'the time bar has a segment per stage reached');
  await done();
});

test('needs attention shows unreleased, failed, lost and orphaned sandboxes', async () => {
  const suite = `attention-${RUN}`;
  const failed = await create({provider: 'sim', labels: {suite}, params: {fail: 'create'}});
  const slow = await create({provider: 'sim', labels: {suite}, params: {destroy_delay_ms: 20000}});
  const lost = await create({provider: 'sim', labels: {suite}});
  const orphan = await create({provider: 'sim', labels: {suite}});
  for (const s of [failed, slow, lost, orphan]) await settled(s.id);
  await ok('DELETE', `/v1/sandboxes/${slow.id}`);
  // Lose one: its resource disappears behind Tether's back.
  await rm(join(SIM_DIR, lost.id));
  // Orphan one: once released, its resource comes back, as if a late create made it.
  await ok('DELETE', `/v1/sandboxes/${orphan.id}`);
  await released(orphan.id);
  await writeFile(join(SIM_DIR, orphan.id), JSON.stringify({sandbox_id: orphan.id, created_at: new Date(Date.now() - 60_000).toISOString(), pid: 1}) + '\n');
  const past = new Date(Date.now() - 60_000);
  await utimes(join(SIM_DIR, orphan.id), past, past);
  await until('the janitor to mark the lost sandbox', async () => (await call('GET', `/v1/sandboxes/${lost.id}`)).json?.reason === 'lost');
  await until('the janitor to destroy the orphan', async () => (await call('GET', '/v1/reconcile-events?limit=500')).json?.items.some((e) => e.sandbox_id === orphan.id && e.action === 'orphan_destroyed'));

  const {page, done} = await open();
  await signIn(page);
  await page.getByRole('link', {name: 'Needs attention'}).click();
  await page.locator('main h1', {hasText: 'Needs attention'}).waitFor();
  await page.getByLabel('Unreleased for more than (minutes)').fill('0');
  await page.getByRole('button', {name: 'Apply'}).click();
  const sec = (id) => page.locator(`[aria-labelledby=${id}]`);
  await sec('sec-ended-but-not-released').locator(`tr[data-id="${slow.id}"]`).waitFor();
  await sec('sec-failed-creates').locator(`tr[data-id="${failed.id}"]`, {hasText: 'injected failure'}).waitFor();
  await sec('sec-lost-by-their-provider').locator(`tr[data-id="${lost.id}"]`).waitFor();
  await sec('sec-reconciliation').locator('tr[data-action=orphan_destroyed]', {hasText: orphan.id}).waitFor();
  await sec('sec-reconciliation').locator('tr[data-action=lost]', {hasText: lost.id}).waitFor();
  // The ready ones are not there.
  assert.equal(await sec('sec-ended-but-not-released').locator(`tr[data-id="${failed.id}"]`).count(), 0);
  await done();
});

test('a key made in the console works until it is revoked there', async () => {
  const name = `console-${RUN}`;
  const admin = await open();
  await signIn(admin.page);
  await admin.page.getByRole('link', {name: 'API keys'}).click();
  await admin.page.getByLabel('Name').fill(name);
  await admin.page.getByRole('button', {name: 'Create key'}).click();
  const secret = (await admin.page.locator('#new-secret').textContent()).trim();
  assert.ok(secret.length > 20, 'the secret is shown');
  const row = admin.page.locator(`tr[data-name="${name}"]`);
  await row.locator('.badge', {hasText: 'active'}).waitFor();
  assert.equal((await call('GET', '/v1/sandboxes?limit=1', {key: secret})).status, 200, 'the new key works');

  // Someone signs in with it in another browser.
  const user = await open();
  await signIn(user.page, secret);

  // The secret is shown once: not after a reload.
  await load(admin.page, () => admin.page.reload());
  await row.waitFor();
  assert.equal(await admin.page.locator('#new-secret').count(), 0);
  assert.ok(!(await admin.page.locator('main').textContent()).includes(secret), 'the secret is shown again');

  await row.getByRole('button', {name: `Revoke key ${name}`}).click();
  await row.getByRole('button', {name: `Confirm: revoke key ${name}`}).click();
  await row.locator('.badge', {hasText: 'revoked'}).waitFor();
  await until('the revoked key to be refused', async () => (await call('GET', '/v1/sandboxes?limit=1', {key: secret})).status === 401, 15000);

  // The console signed in with it sends its user back to sign in.
  await go(user.page, '#/owners');
  await user.page.locator('#signin-error', {hasText: 'the API key is not valid'}).waitFor();
  assert.equal(await user.page.evaluate(() => sessionStorage.getItem('tether.apiKey')), null);
  await user.done();
  await admin.done();
});

test('a key of another tenant sees none of tenant A\'s sandboxes', async () => {
  const mine = await create({provider: 'sim', owner: `a-owner-${RUN}`, labels: {suite: `tenant-${RUN}`}});
  await settled(mine.id);
  const theirs = await create({provider: 'sim', labels: {suite: `tenant-b-${RUN}`}}, OTHER);
  await settled(theirs.id, OTHER);
  const aIds = (await ok('GET', '/v1/sandboxes?limit=500')).items.map((s) => s.id);
  assert.ok(aIds.length > 3);

  // Every row B's console shows is one of B's sandboxes (as B's key lists
  // them), and none is A's.
  const onlyB = async () => {
    const shown = await rowIds(page);
    const bIds = new Set((await ok('GET', '/v1/sandboxes?limit=500', {key: OTHER})).items.map((s) => s.id));
    for (const id of shown) assert.ok(bIds.has(id), `tenant B's console shows ${id}, which is not B's`);
    const text = await page.locator('main').textContent();
    for (const id of [...aIds, late?.id].filter(Boolean)) assert.ok(!text.includes(id), `tenant B's console shows tenant A's ${id}`);
    return shown;
  };
  let late;
  const {page, done} = await open();
  await signIn(page, OTHER);
  await page.locator(`#results tr[data-id="${theirs.id}"]`).waitFor();
  await onlyB();
  // Sandboxes created now: A's does not show up live; B's does.
  late = await create({provider: 'sim', labels: {suite: `tenant-${RUN}`}});
  const lateB = await create({provider: 'sim', labels: {suite: `tenant-b-${RUN}`}}, OTHER);
  await settled(late.id);
  await settled(lateB.id, OTHER);
  await page.locator(`#results tr[data-id="${lateB.id}"][data-state=ready]`).waitFor();
  assert.ok((await onlyB()).includes(theirs.id));

  await go(page, `#/sandboxes/${mine.id}`);
  await page.locator('#flash', {hasText: 'not found'}).waitFor();
  await go(page, '#/owners');
  await page.locator('main h1', {hasText: 'Owners'}).waitFor();
  await page.locator('main .table-wrap').waitFor();
  assert.equal(await page.locator(`tr[data-owner="a-owner-${RUN}"]`).count(), 0);
  await go(page, '#/keys');
  await page.locator('tr[data-name]').first().waitFor();
  assert.equal(await page.locator('tr[data-name="bootstrap"]').count(), 0, 'tenant B sees tenant A\'s keys');
  await done();
});

test('API strings are shown as text, never run as HTML', async () => {
  const evil = '<img src=x onerror="window.pwned=1"><b>bold</b>';
  const sb = await create({provider: 'sim', labels: {note: evil, suite: `xss-${RUN}`}});
  await settled(sb.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes?label=${encodeURIComponent(`suite=xss-${RUN}`)}`);
  await wantRows(page, [sb.id]);
  await page.locator('main code', {hasText: `note=${evil}`}).waitFor();
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main code', {hasText: `note=${evil}`}).waitFor();
  assert.equal(await page.locator('main img, main b').count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await done();
});

test('keyboard: a skip link, labelled controls, nav by keys and a visible focus', async () => {
  const {page, done} = await open();
  await signIn(page);
  await page.locator('#live[data-status=live]').waitFor();
  for (const hash of ['#/sandboxes', '#/attention', '#/keys', '#/pools', '#/webhooks']) {
    await go(page, hash);
    await page.locator('main .table-wrap').first().waitFor();
    const unlabelled = await page.$$eval('main input, main select, main button', (els) => els
      .filter((el) => !(el.labels?.length || el.getAttribute('aria-label') || (el.tagName === 'BUTTON' && el.textContent.trim())))
      .map((el) => el.outerHTML));
    assert.deepEqual(unlabelled, [], `${hash}: controls without a label`);
  }
  // A fresh load: the first Tab reaches the skip link, which moves to the content.
  await go(page, '#/sandboxes');
  await load(page, () => page.reload());
  await page.locator('main .table-wrap').waitFor();
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'main');
  assert.equal(await page.evaluate(() => location.hash), '#/sandboxes', 'the skip link changed the route');
  // From the top again, Tab reaches the nav; Enter follows a link.
  await load(page, () => page.reload());
  await page.locator('main .table-wrap').waitFor();
  let reached = false;
  for (let i = 0; i < 15 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement.textContent === 'Owners');
  }
  assert.ok(reached, 'Tab does not reach the Owners link');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, 'none', 'the focused link has no visible focus');
  await page.keyboard.press('Enter');
  await page.locator('main h1', {hasText: 'Owners'}).waitFor();
  assert.equal(await page.evaluate(() => location.hash), '#/owners');
  // The heading shows before the page's data has loaded; focus moves to it
  // once the page is complete.
  await page.waitForFunction(() => document.activeElement?.tagName === 'H1', null, {timeout: 10_000}).catch(() => {});
  assert.equal(await page.evaluate(() => document.activeElement.tagName), 'H1', 'focus moves to the new page');
  await done();
});

test('pause and resume from a sandbox page, with progress; refusals show why', async () => {
  const suite = `pause-${RUN}`;
  const sb = await create({provider: 'sim', labels: {suite}, params: {pause_delay_ms: 1500}});
  await settled(sb.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main h1', {hasText: sb.id}).waitFor();
  const head = page.locator('.head-state .state');
  await head.filter({hasText: 'ready'}).waitFor();
  assert.equal(await page.getByRole('button', {name: 'Resume'}).count(), 0, 'a ready sandbox offers Resume');

  // Pause: the page shows the pause under way (the provider takes 1.5 s), then paused.
  await page.getByRole('button', {name: 'Pause'}).click();
  await page.locator('.page-actions .progress[data-op=pause]', {hasText: 'Pausing…'}).waitFor();
  assert.equal(await page.getByRole('button', {name: 'Pause'}).count(), 0, 'Pause is offered while pausing');
  await head.filter({hasText: 'paused'}).waitFor({timeout: 20000});
  assert.equal((await ok('GET', `/v1/sandboxes/${sb.id}`)).state, 'paused');
  await page.getByRole('button', {name: 'Resume'}).waitFor();
  assert.equal(await page.locator('.page-actions .progress').count(), 0, 'progress is still shown once paused');
  assert.match(await page.locator('.stage[data-stage=ready]').textContent(), /now paused/);

  // The list shows the state and filters by it.
  await go(page, '#/sandboxes');
  await applyFilters(page, {labels: `suite=${suite}`, state: ['paused']});
  await wantRows(page, [sb.id]);
  assert.match(await page.locator(`#results tr[data-id="${sb.id}"] .state`).textContent(), /paused/);
  await applyFilters(page, {labels: `suite=${suite}`, state: ['ready']});
  await wantRows(page, []);

  // Resume, back to ready; the events show the way there and back.
  await go(page, `#/sandboxes/${sb.id}`);
  await page.getByRole('button', {name: 'Resume'}).click();
  await page.locator('.page-actions .progress[data-op=resume]', {hasText: 'Resuming…'}).waitFor();
  await head.filter({hasText: 'ready'}).waitFor({timeout: 20000});
  await page.getByRole('button', {name: 'Pause'}).waitFor();
  assert.equal((await ok('GET', `/v1/sandboxes/${sb.id}`)).state, 'ready');
  await page.waitForFunction(() => [...document.querySelectorAll('ol.events > li')].map((li) => li.dataset.to).join(',') ===
    'requested,creating,ready,pausing,paused,resuming,ready', null, {timeout: 10000});

  // A real local sandbox pauses (the cgroup freezer) and resumes the same way.
  const local = await create({provider: 'local', labels: {suite}});
  await settled(local.id);
  await go(page, `#/sandboxes/${local.id}`);
  await page.locator('main h1', {hasText: local.id}).waitFor();
  assert.equal(await page.locator('#op-help', {hasText: 'does not report pausing'}).count(), 0, 'local is said not to pause');
  await page.getByRole('button', {name: 'Pause'}).click();
  await head.filter({hasText: 'paused'}).waitFor({timeout: 20000});
  assert.equal((await ok('GET', `/v1/sandboxes/${local.id}`)).state, 'paused');
  await page.getByRole('button', {name: 'Resume'}).click();
  await head.filter({hasText: 'ready'}).waitFor({timeout: 20000});
  assert.equal((await ok('GET', `/v1/sandboxes/${local.id}`)).state, 'ready');

  // A pause the provider refuses: the sandbox goes back to ready, and the page says why.
  const refused = await create({provider: 'sim', labels: {suite}, params: {fail: 'pause'}});
  await settled(refused.id);
  await go(page, `#/sandboxes/${refused.id}`);
  await page.locator('main h1', {hasText: refused.id}).waitFor();
  await page.getByRole('button', {name: 'Pause'}).click();
  await page.locator('#op-error', {hasText: 'Pause refused: '}).waitFor({timeout: 20000});
  assert.match(await page.locator('#op-error').textContent(), /injected failure/);
  await head.filter({hasText: 'ready'}).waitFor();
  for (const s of [sb, local, refused]) await ok('DELETE', `/v1/sandboxes/${s.id}`);
  await done();
});

test('network: an allow-list sandbox\'s rules, policies and credentials shown, its allow list changed there', async () => {
  const suite = `network-${RUN}`;
  const policy = `console-${RUN}`;
  await ok('PUT', `/v1/network-policies/${policy}`, {body: {allow: ['pypi.org', '*.pythonhosted.org']}});
  const sb = await create({provider: 'local', labels: {suite}, params: {network: 'allowlist', allow: ['example.com'], policies: [policy, 'gone']}});
  await settled(sb.id);
  const plain = await create({provider: 'local', labels: {suite}});
  await settled(plain.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  const section = page.locator('[aria-labelledby=sec-network]');
  await section.locator('#network-entries li', {hasText: 'example.com'}).waitFor();
  await section.locator(`#network-policies li[data-policy="${policy}"]`).waitFor();
  assert.match(await section.locator('#network-policies li[data-policy="gone"]').textContent(), /missing/);
  assert.equal(await section.locator(`#network-policies li[data-policy="${policy}"] .badge`).count(), 0, 'an existing policy is said missing');

  // A bad entry: the API's reason, nothing changed.
  await page.locator('#network-allow').fill('example.com\nnot a host!');
  await section.getByRole('button', {name: 'Save allow list'}).click();
  await section.locator('#network-error', {hasText: 'not a host!'}).waitFor();
  assert.deepEqual((await ok('GET', `/v1/sandboxes/${sb.id}/network`)).allow, ['example.com']);

  // A good list: saved, shown, and in the activity as an edit.
  await page.locator('#network-allow').fill('example.com\n\n  github.com:443 \n');
  await section.getByRole('button', {name: 'Save allow list'}).click();
  await section.locator('#network-saved', {hasText: 'Saved'}).waitFor();
  await section.locator('#network-entries li', {hasText: 'github.com:443'}).waitFor();
  const net = await ok('GET', `/v1/sandboxes/${sb.id}/network`);
  assert.deepEqual(net.allow, ['example.com', 'github.com:443']);
  assert.equal(net.edited, true);
  await page.locator('[aria-labelledby=sec-activity] tr[data-kind=network_update]', {hasText: 'github.com:443'}).waitFor({timeout: 10000});

  // A sandbox without an allow list says so, and offers no form.
  await go(page, `#/sandboxes/${plain.id}`);
  await page.locator('[aria-labelledby=sec-network] #network', {hasText: 'No network'}).waitFor();
  assert.equal(await page.locator('#network-allow').count(), 0, 'a sandbox without an allow list offers to edit one');
  for (const s of [sb, plain]) await ok('DELETE', `/v1/sandboxes/${s.id}`);
  await ok('DELETE', `/v1/network-policies/${policy}`);
  await done();
});

test('preview URLs: make one for a real local server, its URL once, open it, see its traffic, revoke it (410)', async () => {
  const suite = `preview-${RUN}`;
  const sb = await create({provider: 'local', labels: {suite}});
  await settled(sb.id);
  // A real server in the sandbox: python3's http.server on its own loopback.
  const page0 = `hello preview ${RUN}`;
  const started = await ok('POST', `/v1/sandboxes/${sb.id}/exec`, {body: {
    command: `mkdir -p /workspace/www && printf %s "$PAGE" > /workspace/www/index.html && cd /workspace/www && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)`,
    env: {PAGE: page0}, timeout_seconds: 30}});
  assert.equal(started.exit_code, 0, JSON.stringify(started));
  // Through the API with the key first (kind port in the activity), once it listens.
  await until('the server to listen', async () => {
    const r = await fetch(`${BASE}/v1/sandboxes/${sb.id}/ports/8000/index.html`, {headers: {Authorization: `Bearer ${KEY}`}});
    return r.status === 200 && (await r.text()) === page0;
  }, 20000);

  const {page, done} = await open({permissions: ['clipboard-read', 'clipboard-write']});
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main h1', {hasText: sb.id}).waitFor();
  const section = page.locator('[aria-labelledby=sec-preview-urls]');
  await section.locator('#previews .empty', {hasText: 'No preview URLs.'}).waitFor();
  assert.equal(await section.locator('#preview-help', {hasText: 'has no ports'}).count(), 0, 'local is said to have no ports');

  // A TTL the API refuses: its detail, and nothing made.
  await page.locator('#preview-port').fill('8000');
  await page.locator('#preview-ttl').fill('999999');
  await page.getByRole('button', {name: 'Make preview URL'}).click();
  await page.locator('#preview-error', {hasText: 'ttl_seconds must be 1-86400 (PREVIEW_MAX_TTL)'}).waitFor();
  assert.match(await page.locator('#preview-error').textContent(), /INVALID_REQUEST, request /);
  assert.deepEqual((await ok('GET', `/v1/sandboxes/${sb.id}/previews`)).items, []);

  // Made: the URL shown once, with Copy and Open; the list has it, without the token.
  await page.locator('#preview-ttl').fill('600');
  await page.getByRole('button', {name: 'Make preview URL'}).click();
  const shown = page.locator('#new-preview-url');
  await shown.waitFor();
  const previewURL = await shown.textContent();
  assert.match(previewURL, new RegExp(`^${BASE.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/p/tpv_[A-Za-z0-9_-]+/$`));
  assert.equal(await page.locator('#preview-error').textContent(), '');
  const [made] = (await ok('GET', `/v1/sandboxes/${sb.id}/previews`)).items;
  assert.equal(made.port, 8000);
  assert.equal(made.token, null);
  const ttl = new Date(made.expires_at) - new Date(made.created_at);
  assert.ok(Math.abs(ttl - 600_000) < 2000, `a TTL of 600 s, got ${ttl} ms`);
  const row = section.locator(`#previews tr[data-preview="${made.id}"]`);
  await row.waitFor();
  assert.equal(await row.getAttribute('data-state'), 'live');
  assert.match(await row.textContent(), /8000/);
  assert.match(await row.textContent(), /left/);
  assert.ok(!(await section.locator('#previews').textContent()).includes('tpv_'), 'the list shows the token');
  await page.getByRole('button', {name: 'Copy'}).click();
  await page.getByRole('button', {name: 'Copied'}).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), previewURL);
  assert.equal(await page.locator('#new-preview-open').getAttribute('href'), previewURL);

  // The URL works without a key: from here, and opened from the console in a tab of its own.
  const r = await fetch(previewURL + 'index.html');
  assert.equal(r.status, 200);
  assert.equal(await r.text(), page0);
  const [tab] = await Promise.all([page.context().waitForEvent('page'), page.locator('#new-preview-open').click()]);
  await tab.waitForLoadState();
  assert.equal(tab.url(), previewURL);
  // http.server serves index.html at the root.
  assert.equal((await tab.locator('body').textContent()).trim(), page0);
  await tab.close();

  // Its traffic is in the activity: the key's request (port) and the preview's.
  const activity = page.locator('[aria-labelledby=sec-activity]');
  const viaPreview = activity.locator('tr[data-kind=preview]', {hasText: 'GET /index.html'}).first();
  await viaPreview.waitFor({timeout: 20000});
  assert.match(await viaPreview.textContent(), /:8000 GET \/index\.html/);
  assert.match(await viaPreview.textContent(), /HTTP 200/);
  assert.match(await viaPreview.textContent(), new RegExp(`preview ${made.id}`));
  // (The first tries, before the server listened, were PORT_UNREACHABLE.)
  const viaKey = activity.locator('tr[data-kind=port]', {hasText: 'HTTP 200'}).first();
  await viaKey.waitFor();
  assert.match(await viaKey.textContent(), /:8000 GET \/index\.html/);
  assert.match(await viaKey.textContent(), /HTTP 200/);

  // Revoke: asked first; cancel keeps it working.
  await page.getByRole('button', {name: 'Done'}).click();
  assert.equal(await page.locator('#new-preview-url').count(), 0, 'the URL is still shown');
  await row.getByRole('button', {name: `Revoke preview ${made.id}`}).click();
  await row.getByText('Revoke it? Its URL answers 410 at once.').waitFor();
  await row.getByRole('button', {name: 'Cancel'}).click();
  assert.equal((await fetch(previewURL + 'index.html')).status, 200);
  await row.getByRole('button', {name: `Revoke preview ${made.id}`}).click();
  await row.getByRole('button', {name: `Confirm: revoke preview ${made.id}`}).click();
  await section.locator(`#previews tr[data-preview="${made.id}"][data-state=revoked]`).waitFor();
  assert.equal(await row.getByRole('button').count(), 0, 'a revoked preview offers Revoke');
  const gone = await fetch(previewURL + 'index.html');
  assert.equal(gone.status, 410);
  assert.equal((await gone.json()).code, 'PREVIEW_GONE');
  assert.ok((await ok('GET', `/v1/sandboxes/${sb.id}/previews`)).items[0].revoked_at);

  // A paused sandbox is refused with the API's detail.
  await ok('POST', `/v1/sandboxes/${sb.id}/pause?wait=30s`);
  await page.locator('.head-state .state', {hasText: 'paused'}).waitFor({timeout: 20000});
  await page.locator('#preview-port').fill('8000');
  await page.getByRole('button', {name: 'Make preview URL'}).click();
  await page.locator('#preview-error', {hasText: 'SANDBOX_STATE_CONFLICT'}).waitFor();
  assert.equal((await ok('GET', `/v1/sandboxes/${sb.id}/previews`)).items.length, 1);

  // The providers page shows who has ports.
  await go(page, '#/providers');
  const card = page.locator('article[data-provider=local]');
  await card.waitFor();
  assert.match(await card.locator('dl.facts').first().textContent(), /Portsyes/);
  await ok('DELETE', `/v1/sandboxes/${sb.id}`);
  await done();
});

test('snapshots: take one from a sandbox page, see it ready with its size, start a sandbox from it, delete it', async () => {
  const suite = `snap-${RUN}`;
  const sb = await create({provider: 'sim', labels: {suite}, params: {snapshot_delay_ms: 1500, snapshot_bytes: 3 * 1024 * 1024}});
  await settled(sb.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main h1', {hasText: sb.id}).waitFor();
  const section = page.locator('[aria-labelledby=sec-snapshots]');
  await section.locator('#snapshots .empty', {hasText: 'No snapshots.'}).waitFor();
  assert.equal(await page.locator('#snapshot-help', {hasText: 'has no snapshots'}).count(), 0, 'sim is said to have no snapshots');

  // Taken: under way for 1.5 s, listed while creating, then ready with its size.
  await page.getByRole('button', {name: 'Take a snapshot'}).click();
  await page.locator('#snapshot-status', {hasText: 'Taking a snapshot…'}).waitFor();
  await section.locator('#snapshots tr[data-state=creating]').waitFor();
  const ready = section.locator('#snapshots tr[data-state=ready]');
  await ready.waitFor({timeout: 20000});
  const snapID = await ready.getAttribute('data-snapshot');
  const sn = await ok('GET', `/v1/snapshots/${snapID}`);
  assert.deepEqual([sn.state, sn.kind, sn.source_sandbox_id, sn.size_bytes], ['ready', 'manual', sb.id, 3 * 1024 * 1024]);
  assert.match(await ready.textContent(), /3\.0 MiB/);
  assert.match(await ready.textContent(), /manual/);
  await page.locator('#snapshot-status', {hasText: `Snapshot ${snapID}: ready.`}).waitFor();

  // A provider's refusal: the snapshot is listed failed, with the error.
  const refusing = await create({provider: 'sim', labels: {suite}, params: {fail: 'snapshot'}});
  await settled(refusing.id);
  await go(page, `#/sandboxes/${refusing.id}`);
  await page.locator('main h1', {hasText: refusing.id}).waitFor();
  await page.getByRole('button', {name: 'Take a snapshot'}).click();
  await page.locator('#snapshot-error', {hasText: 'failed: '}).waitFor({timeout: 20000});
  assert.match(await page.locator('#snapshots tr[data-state=failed]').textContent(), /injected failure/);
  // A sandbox that has ended is refused with the API's problem.
  await ok('DELETE', `/v1/sandboxes/${refusing.id}`);
  await page.locator('.head-state .state', {hasText: 'terminated'}).waitFor();
  await page.getByRole('button', {name: 'Take a snapshot'}).click();
  await page.locator('#snapshot-error', {hasText: 'SANDBOX_STATE_CONFLICT'}).waitFor();

  // Start a sandbox from it: the console goes to the new one, which starts from it.
  await go(page, `#/sandboxes/${sb.id}`);
  await section.locator(`#snapshots tr[data-snapshot="${snapID}"]`).waitFor();
  await page.getByRole('button', {name: `Start a sandbox from snapshot ${snapID}`}).click();
  await page.waitForFunction((id) => /^#\/sandboxes\/sbx_/.test(location.hash) && !location.hash.includes(id), sb.id);
  const newID = decodeURIComponent((await page.evaluate(() => location.hash)).split('/')[2]);
  await page.locator('main h1', {hasText: newID}).waitFor();
  await page.locator('#from-snapshot', {hasText: snapID}).waitFor();
  const fresh = await settled(newID);
  assert.deepEqual([fresh.state, fresh.from_snapshot, fresh.provider], ['ready', snapID, 'sim']);

  // Delete: asked first; cancel keeps it; then it is gone from the list.
  await go(page, `#/sandboxes/${sb.id}`);
  const row = section.locator(`#snapshots tr[data-snapshot="${snapID}"]`);
  await row.waitFor();
  await row.getByRole('button', {name: `Delete snapshot ${snapID}`}).click();
  await row.getByText('Delete it? Its data goes at the next reconciliation.').waitFor();
  await row.getByRole('button', {name: 'Cancel'}).click();
  assert.equal((await ok('GET', `/v1/snapshots/${snapID}`)).state, 'ready');
  await row.getByRole('button', {name: `Delete snapshot ${snapID}`}).click();
  await row.getByRole('button', {name: `Confirm: delete snapshot ${snapID}`}).click();
  await section.locator('#snapshots .empty', {hasText: 'No snapshots.'}).waitFor();
  assert.equal((await ok('GET', `/v1/snapshots/${snapID}`)).state, 'deleted');

  await go(page, '#/providers');
  await page.locator('article[data-provider=sim]').waitFor();
  assert.match(await page.locator('article[data-provider=sim] dl.facts').first().textContent(), /Snapshotsyes/);
  for (const id of [sb.id, newID]) await ok('DELETE', `/v1/sandboxes/${id}`);
  await done();
});

test('pools: create one and see it fill, claims handed out and refilled, resize, delete with confirmation', async () => {
  const name = `pool-${RUN}`;
  const {page, done} = await open();
  await signIn(page);
  await page.getByRole('link', {name: 'Pools', exact: true}).click();
  await page.locator('main h1', {hasText: 'Warm pools'}).waitFor();

  // A name the API refuses: its detail, and nothing made.
  await page.locator('#pool-name').fill('Not_A_Name');
  await page.locator('#pool-min').fill('1');
  await page.getByRole('button', {name: 'Create pool'}).click();
  await page.locator('#pool-create-error', {hasText: 'name must be 1-63 lowercase letters'}).waitFor();
  assert.equal((await call('GET', '/v1/pools/not-a-name')).status, 404);

  await page.locator('#pool-name').fill(name);
  await page.locator('#pool-provider').selectOption('sim');
  await page.locator('#pool-min').fill('2');
  await page.locator('#pool-max').fill('3');
  await page.getByRole('button', {name: 'Create pool'}).click();
  const row = page.locator(`#pools tr[data-pool="${name}"]`);
  await row.waitFor();
  // It fills, live: the refiller makes two members and they become ready.
  await page.locator(`#pools tr[data-pool="${name}"][data-ready="2"]`).waitFor({timeout: 20000});
  assert.match(await row.textContent(), /sim/);
  assert.match(await row.locator('.badge').textContent(), /full/);

  await row.getByRole('link', {name}).click();
  await page.locator('main h1', {hasText: `Pool ${name}`}).waitFor();
  const memberIds = () => rowIds(page, '#members');
  await until('two ready members', async () => (await page.$$eval('#members tbody tr[data-state=ready]', (t) => t.length)) === 2);
  const before = await memberIds();

  // A claim: the member leaves the pool (handed out), and the pool refills.
  const claimed = await ok('POST', '/v1/sandboxes', {body: {pool: name, labels: {suite: `pool-${RUN}`}}});
  assert.ok(before.includes(claimed.id), 'the claim took one of the members shown');
  await page.locator(`#handed-out tr[data-id="${claimed.id}"]`).waitFor();
  await until('the pool to refill', async () => {
    const ids = await page.$$eval('#members tbody tr[data-state=ready]', (t) => t.map((x) => x.dataset.id));
    return ids.length === 2 && !ids.includes(claimed.id);
  }, 20000);

  // Resize: a pair the API refuses shows its detail; a good one ends the surplus.
  await page.locator('#resize-min').fill('5');
  await page.getByRole('button', {name: 'Save sizes'}).click();
  await page.locator('#resize-error', {hasText: 'min_ready'}).waitFor();
  assert.equal((await ok('GET', `/v1/pools/${name}`)).min_ready, 2);
  await page.locator('#resize-min').fill('1');
  await page.locator('#resize-max').fill('1');
  await page.getByRole('button', {name: 'Save sizes'}).click();
  await until('one member left', async () => (await memberIds()).length === 1, 20000);
  const pool = await ok('GET', `/v1/pools/${name}`);
  assert.deepEqual([pool.min_ready, pool.max_size, pool.size], [1, 1, 1]);
  await page.locator('#pool-size', {hasText: '1'}).waitFor();

  // Delete: asked first; cancel keeps it.
  await page.getByRole('button', {name: `Delete pool ${name}`}).click();
  await page.getByText(`Delete pool ${name} and end its 1 unclaimed member?`).waitFor();
  await page.getByRole('button', {name: 'Cancel'}).click();
  assert.equal((await call('GET', `/v1/pools/${name}`)).status, 200);
  await page.getByRole('button', {name: `Delete pool ${name}`}).click();
  await page.getByRole('button', {name: `Confirm: delete pool ${name}`}).click();
  await page.locator('main h1', {hasText: 'Warm pools'}).waitFor();
  await page.locator('#pools .table-wrap').waitFor();
  assert.equal(await page.locator(`#pools tr[data-pool="${name}"]`).count(), 0);
  assert.equal((await call('GET', `/v1/pools/${name}`)).status, 404);
  // The claimed sandbox is its owner's: it lives on.
  assert.equal((await ok('GET', `/v1/sandboxes/${claimed.id}`)).state, 'ready');
  await ok('DELETE', `/v1/sandboxes/${claimed.id}`);
  await done();
});

// receiver is a loopback webhook receiver: it records each delivery and
// answers with status() (204 unless told otherwise).
async function receiver() {
  const got = [];
  let status = 204;
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body = null;
      try { body = JSON.parse(raw); } catch { /* recorded raw */ }
      got.push({headers: req.headers, raw, body, status});
      res.writeHead(status);
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/hook-${RUN}`,
    got,
    answer(s) { status = s; },
    close: () => new Promise((r) => server.close(r)),
  };
}

test('webhooks: add an endpoint (its secret once), see deliveries, a failing endpoint replayed, delete', async () => {
  const rx = await receiver();
  const {page, done} = await open();
  try {
    await signIn(page);
    await page.getByRole('link', {name: 'Webhooks'}).click();
    await page.locator('main h1', {hasText: 'Webhooks'}).waitFor();
    // A URL the API refuses: its detail.
    await page.getByLabel('URL').fill('ftp://example.com/x');
    await page.getByRole('button', {name: 'Add endpoint'}).click();
    await page.locator('#wh-create-error', {hasText: 'INVALID_REQUEST'}).waitFor();

    await page.getByLabel('URL').fill(rx.url);
    await page.getByLabel('Description').fill(`console ${RUN}`);
    await page.locator('fieldset.checks input[name=state][value=ready]').check();
    await page.getByRole('button', {name: 'Add endpoint'}).click();
    const secret = (await page.locator('#new-webhook-secret').textContent()).trim();
    assert.match(secret, /^whsec_/);
    const list = (await ok('GET', '/v1/webhooks')).items;
    const wh = list.find((w) => w.url === rx.url);
    assert.ok(wh, 'the endpoint was made');
    assert.deepEqual(wh.events, {states: ['ready'], reasons: [], types: []});
    const row = page.locator(`#webhooks tr[data-webhook="${wh.id}"]`);
    await row.locator('.badge', {hasText: 'active'}).waitFor();
    assert.match(await row.textContent(), /into.*ready/);

    // The secret is shown once: not after a reload.
    await load(page, () => page.reload());
    await row.waitFor();
    assert.equal(await page.locator('#new-webhook-secret').count(), 0);
    assert.ok(!(await page.locator('main').textContent()).includes(secret), 'the secret is shown again');

    // An event it wants: a delivery, signed with that secret, shown on the endpoint's page.
    await row.getByRole('link', {name: rx.url}).click();
    await page.locator('main h1', {hasText: wh.id}).waitFor();
    const first = await create({provider: 'sim', labels: {suite: `webhook-${RUN}`}});
    await settled(first.id);
    const hit = await until('the receiver to get the ready event', async () =>
      rx.got.find((g) => g.body?.events?.some((e) => e.sandbox_id === first.id && e.to === 'ready')), 20000);
    const [, t, v1] = hit.headers['tether-signature'].match(/^t=(\d+),v1=([0-9a-f]+)$/);
    assert.equal(v1, createHmac('sha256', secret).update(`${t}.${hit.raw}`).digest('hex'), 'the delivery is signed with the secret shown');
    const delivered = page.locator(`#deliveries tr[data-delivery="${hit.body.id}"][data-status=delivered]`);
    await delivered.waitFor({timeout: 15000});
    assert.match(await delivered.textContent(), /204/);

    // The receiver fails: the delivery is retried with its error shown, then
    // (WEBHOOK_RETRY_FOR) fails and the endpoint is failing.
    rx.answer(503);
    const second = await create({provider: 'sim', labels: {suite: `webhook-${RUN}`}});
    await settled(second.id);
    const failedId = (await until('a failed attempt', async () =>
      rx.got.find((g) => g.status === 503 && g.body?.events?.some((e) => e.sandbox_id === second.id)), 20000)).body.id;
    const failedRow = page.locator(`#deliveries tr[data-delivery="${failedId}"]`);
    await failedRow.locator('.error', {hasText: '503'}).waitFor({timeout: 15000});
    await page.locator(`#deliveries tr[data-delivery="${failedId}"][data-status=failed]`).waitFor({timeout: 30000});
    await page.locator('#webhook-state[data-state=failing]').waitFor({timeout: 15000});
    assert.ok(Number((await failedRow.locator('td[data-label=Attempts]').textContent()).trim()) >= 2, 'the delivery was retried');

    // Replay, the receiver well again: the endpoint is active, and the events come again.
    rx.answer(204);
    const seen = rx.got.length;
    await page.getByRole('button', {name: 'Replay from where it stopped'}).click();
    await page.locator('#replay-status', {hasText: 'Replay started'}).waitFor();
    await page.locator('#webhook-state[data-state=active]').waitFor({timeout: 15000});
    const again = await until('the replayed delivery', async () =>
      rx.got.slice(seen).find((g) => g.status === 204 && g.body?.events?.some((e) => e.sandbox_id === second.id)), 20000);
    assert.notEqual(again.body.id, failedId, 'a replay is a new delivery');
    await page.locator(`#deliveries tr[data-delivery="${again.body.id}"][data-status=delivered]`).waitFor({timeout: 15000});

    // Replay from a delivery: its events come once more.
    const more = rx.got.length;
    await page.locator(`#deliveries tr[data-delivery="${hit.body.id}"]`).getByRole('button', {name: `Replay from delivery ${hit.body.id}`}).click();
    await until('the events from the first delivery again', async () =>
      rx.got.slice(more).some((g) => g.body?.events?.some((e) => e.sandbox_id === first.id && e.to === 'ready')), 20000);

    // Delete, confirmed.
    await page.getByRole('button', {name: `Delete webhook ${rx.url}`}).click();
    await page.getByRole('button', {name: `Confirm: delete webhook ${rx.url}`}).click();
    await page.locator('main h1', {hasText: 'Webhooks'}).waitFor();
    await page.locator('#webhooks .table-wrap').waitFor();
    assert.equal(await page.locator(`#webhooks tr[data-webhook="${wh.id}"]`).count(), 0);
    assert.equal((await call('GET', `/v1/webhooks/${wh.id}`)).status, 404);
    for (const s of [first, second]) await ok('DELETE', `/v1/sandboxes/${s.id}`);
    await done();
  } finally {
    await rx.close();
  }
});

test('webhooks need a key with manage_keys: another key is told so', async () => {
  const made = await ok('POST', '/v1/keys', {body: {name: `no-manage-${RUN}`}});
  assert.equal(made.key.manage_keys, false);
  const {page, done} = await open();
  try {
    await signIn(page, made.secret);
    await go(page, '#/webhooks');
    await page.locator('#flash', {hasText: 'webhooks take an API key with manage_keys'}).waitFor();
    assert.equal(await page.locator('#webhooks tbody tr').count(), 0);
    await done();
  } finally {
    await ok('DELETE', `/v1/keys/${made.key.id}`);
  }
});

// hold makes the page's requests that match pred wait for their answer:
// each goes to Tether and its real answer is held back until release().
async function hold(page, pred) {
  let release;
  const gate = new Promise((r) => { release = r; });
  const held = [];
  const handler = async (route) => {
    held.push(route.request().url());
    const resp = await route.fetch();
    await gate;
    await route.fulfill({response: resp});
  };
  await page.route((u) => pred(new URL(u)), handler);
  return {
    held,
    async release() {
      release();
      await page.unroute((u) => pred(new URL(u)), handler);
    },
  };
}

test('loading: a page says Loading… while its answer is on its way, and "No sandboxes" only once it came', async () => {
  const sb = await create({provider: 'sim', labels: {suite: `loading-${RUN}`}});
  await settled(sb.id);
  const {page, done} = await open();
  await signIn(page);
  await page.locator('#results .table-wrap').waitFor();

  // The list, for a filter nothing matches, its answer held.
  const list = await hold(page, (u) => u.pathname === '/v1/sandboxes');
  await go(page, `#/sandboxes?label=${encodeURIComponent(`suite=nothing-${RUN}`)}`);
  await until('the list request to be held', async () => list.held.length > 0);
  await page.locator('#results .loading', {hasText: 'Loading sandboxes…'}).waitFor();
  await page.waitForTimeout(500); // the answer stays held: nothing else is drawn meanwhile
  assert.equal(await page.locator('#results .loading').isVisible(), true);
  assert.equal(await page.locator('#results .empty, #results table').count(), 0, 'the table or "none" was drawn before the answer');
  assert.equal(await page.locator('main h1', {hasText: 'Sandboxes'}).isVisible(), true, 'the heading waits for the data');
  await list.release();
  await page.locator('#results .empty', {hasText: 'No sandboxes match these filters.'}).waitFor();
  assert.equal(await page.locator('#results .loading').count(), 0);

  // A sandbox's page, its events held: every section waits, saying so.
  const events = await hold(page, (u) => u.pathname === `/v1/sandboxes/${sb.id}/events`);
  await go(page, `#/sandboxes/${sb.id}`);
  await until('the events request to be held', async () => events.held.length > 0);
  for (const sec of ['sec-summary', 'sec-timeline', 'sec-activity', 'sec-lease']) {
    await page.locator(`[aria-labelledby=${sec}] .loading`, {hasText: 'Loading…'}).first().waitFor();
  }
  await page.waitForTimeout(300);
  assert.equal(await page.locator('[aria-labelledby=sec-summary] dl.facts').count(), 0);
  await events.release();
  await page.locator('[aria-labelledby=sec-summary] dl.facts').waitFor();
  await page.locator('[aria-labelledby=sec-activity] .empty', {hasText: 'No exec, file, port or network activity recorded.'}).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('main .loading').length === 0);

  // An answer that is an error: the flash says it, and no part says Loading… for ever.
  await go(page, '#/sandboxes/sbx_nothere');
  await page.locator('#flash').filter({hasText: /INVALID_REQUEST|NOT_FOUND/}).waitFor();
  await page.locator('main .not-loaded').first().waitFor();
  assert.equal(await page.locator('main .loading').count(), 0);
  await done();
});

test('end a sandbox from its row and from its page, asked first; a creation is cancelled the same way', async () => {
  const suite = `end-${RUN}`;
  const a = await create({provider: 'sim', labels: {suite}});
  const b = await create({provider: 'sim', labels: {suite}});
  for (const s of [a, b]) await settled(s.id);
  const {page, done} = await open();
  await signIn(page);
  await page.locator('#live[data-status=live]').waitFor();
  await go(page, `#/sandboxes?label=${encodeURIComponent(`suite=${suite}`)}`);
  await wantRows(page, [a.id, b.id]);

  // From the row: asked first; a live update meanwhile leaves the question be; Cancel keeps it.
  const row = page.locator(`#results tr[data-id="${a.id}"]`);
  await row.getByRole('button', {name: `End sandbox ${a.id}`}).click();
  await row.getByText('End it now? Its processes stop').waitFor();
  const c = await create({provider: 'sim', labels: {suite}});
  await settled(c.id);
  await page.waitForTimeout(1000); // the events of c would have redrawn the table by now
  assert.equal(await row.getByRole('button', {name: `Confirm: end sandbox ${a.id}`}).isVisible(), true, 'a redraw took the question away');
  await row.getByRole('button', {name: 'Cancel'}).click();
  await wantRows(page, [a.id, b.id, c.id]);
  assert.equal((await ok('GET', `/v1/sandboxes/${a.id}`)).state, 'ready');
  await row.getByRole('button', {name: `End sandbox ${a.id}`}).click();
  await row.getByRole('button', {name: `Confirm: end sandbox ${a.id}`}).click();
  await page.locator(`#results tr[data-id="${a.id}"][data-state=terminated]`).waitFor();
  const ended = await ok('GET', `/v1/sandboxes/${a.id}`);
  assert.deepEqual([ended.state, ended.reason], ['terminated', 'requested']);
  assert.equal(await row.getByRole('button', {name: `End sandbox ${a.id}`}).count(), 0, 'an ended sandbox offers End');
  assert.equal((await ok('GET', `/v1/sandboxes/${b.id}`)).state, 'ready', 'End ended another sandbox');

  // From its page: asked first, then ended; the page follows.
  await go(page, `#/sandboxes/${b.id}`);
  const head = page.locator('.head-state .state');
  await head.filter({hasText: 'ready'}).waitFor();
  await page.getByRole('button', {name: 'End sandbox'}).click();
  await page.locator('#end-question', {hasText: 'End it now?'}).waitFor();
  await page.getByRole('button', {name: 'Cancel'}).click();
  await page.getByRole('button', {name: 'End sandbox'}).waitFor();
  assert.equal((await ok('GET', `/v1/sandboxes/${b.id}`)).state, 'ready');
  await page.getByRole('button', {name: 'End sandbox'}).click();
  await page.getByRole('button', {name: 'Confirm end'}).click();
  await head.filter({hasText: 'terminated'}).waitFor();
  assert.match(await page.locator('.head-state').textContent(), /reason: requested/);
  assert.equal(await page.getByRole('button', {name: 'End sandbox'}).count(), 0, 'an ended sandbox offers End');
  assert.equal((await ok('GET', `/v1/sandboxes/${b.id}`)).reason, 'requested');

  // A sandbox still being created shows its progress; ending it cancels the creation.
  const slow = await create({provider: 'sim', labels: {suite}, params: {create_delay_ms: 600000}});
  await go(page, `#/sandboxes/${slow.id}`);
  await page.locator('.page-actions .progress[data-op=create]').waitFor();
  await page.getByRole('button', {name: 'End sandbox'}).click();
  await page.locator('#end-question', {hasText: 'Its creation is cancelled.'}).waitFor();
  await page.getByRole('button', {name: 'Confirm end'}).click();
  await head.filter({hasText: 'cancelled'}).waitFor();
  assert.equal(await page.locator('.page-actions .progress').count(), 0, 'a cancelled sandbox shows its creation under way');
  assert.equal((await ok('GET', `/v1/sandboxes/${slow.id}`)).state, 'cancelled');
  await ok('DELETE', `/v1/sandboxes/${c.id}`);
  await done();
});

test('end an owner\'s sandboxes from the owners view and from the owner\'s page, asked first', async () => {
  const owner = `ops-${RUN}`;
  const other = `ops-other-${RUN}`;
  const third = `ops-third-${RUN}`;
  const mine = [await create({provider: 'sim', owner}), await create({provider: 'sim', owner})];
  const kept = await create({provider: 'sim', owner: other});
  const last = await create({provider: 'sim', owner: third});
  for (const s of [...mine, kept, last]) await settled(s.id);
  const {page, done} = await open();
  await signIn(page);
  await page.getByRole('link', {name: 'Owners'}).click();
  const row = page.locator(`#owners tr[data-owner="${owner}"]`);
  await row.waitFor();

  await row.getByRole('button', {name: `End owner ${owner}`}).click();
  await row.getByText(`End ${owner}'s lease and its 2 live sandboxes?`).waitFor();
  await row.getByRole('button', {name: 'Cancel'}).click();
  for (const s of mine) assert.equal((await ok('GET', `/v1/sandboxes/${s.id}`)).state, 'ready');
  await row.getByRole('button', {name: `End owner ${owner}`}).click();
  await row.getByRole('button', {name: `Confirm: end owner ${owner}`}).click();
  await page.locator('#owner-status', {hasText: `Owner ${owner} ended: 2 sandboxes ended.`}).waitFor();
  for (const s of mine) {
    const got = await ok('GET', `/v1/sandboxes/${s.id}`);
    assert.deepEqual([got.state, got.reason], ['terminated', 'owner_released']);
  }
  assert.equal((await ok('GET', `/v1/sandboxes/${kept.id}`)).state, 'ready', 'another owner\'s sandbox ended');
  await row.filter({hasText: 'lapsed'}).waitFor();
  assert.equal((await row.locator('td[data-label="Live sandboxes"]').textContent()).trim(), '0');
  assert.equal(await row.getByRole('button', {name: `End owner ${owner}`}).count(), 0, 'an owner with nothing left to end offers End');

  // The owner's page, reached from a sandbox's owner link.
  await go(page, `#/sandboxes/${last.id}`);
  await page.locator('[aria-labelledby=sec-summary]').getByRole('link', {name: third}).click();
  await page.locator('main h1', {hasText: `Owner ${third}`}).waitFor();
  await page.locator(`#owner-sandboxes tr[data-id="${last.id}"]`).waitFor();
  await page.getByRole('button', {name: `End owner ${third}`}).click();
  await page.getByText(`End ${third}'s lease and its 1 live sandbox?`).waitFor();
  await page.getByRole('button', {name: `Confirm: end owner ${third}`}).click();
  await page.locator('#owner-status', {hasText: `Owner ${third} ended: 1 sandbox ended.`}).waitFor();
  await page.locator(`#owner-sandboxes tr[data-id="${last.id}"][data-state=terminated]`).waitFor();
  assert.equal((await ok('GET', `/v1/sandboxes/${last.id}`)).reason, 'owner_released');
  await ok('DELETE', `/v1/sandboxes/${kept.id}`);
  await done();
});

test('create a sandbox: provider, image, owner, TTL, labels; it is shown on its way to ready; refusals inline', async () => {
  const suite = `create-${RUN}`;
  const {page, done} = await open();
  await signIn(page);
  await page.getByRole('link', {name: 'New sandbox'}).click();
  await page.locator('main h1', {hasText: 'New sandbox'}).waitFor();
  const providers = await page.$$eval('#new-provider option', (os) => os.map((o) => o.value));
  assert.deepEqual(providers.sort(), ['local', 'sim']);

  // sim lists no image: the field is hidden.
  await page.locator('#new-provider').selectOption('sim');
  assert.equal(await page.locator('#new-image').isVisible(), false, 'an image is offered for sim');
  // Labels that are not key=value, then an owner the API refuses: said inline, nothing made.
  await page.locator('#new-labels').fill('nonsense');
  await page.getByRole('button', {name: 'Create sandbox'}).click();
  await page.locator('#create-error', {hasText: 'label "nonsense" must look like key=value'}).waitFor();
  await page.locator('#new-labels').fill(`suite=${suite}\nteam=ops`);
  await page.locator('#new-owner').fill('not an owner!');
  await page.getByRole('button', {name: 'Create sandbox'}).click();
  await page.locator('#create-error', {hasText: 'owner must be 1-128 characters'}).waitFor();
  assert.match(await page.locator('#create-error').textContent(), /INVALID_REQUEST, request /);
  assert.deepEqual((await ok('GET', `/v1/sandboxes?label=suite=${suite}`)).items, []);

  // Made: the console goes to it, and shows it creating, then ready.
  const owner = `creator-${RUN}`;
  await page.locator('#new-owner').fill(owner);
  await page.locator('#new-ttl').fill('600');
  await page.locator('#new-params').fill('{"create_delay_ms": 3000}');
  await page.getByRole('button', {name: 'Create sandbox'}).click();
  await page.waitForFunction(() => /^#\/sandboxes\/sbx_/.test(location.hash));
  const id = decodeURIComponent((await page.evaluate(() => location.hash)).split('/')[2]);
  await page.locator('main h1', {hasText: id}).waitFor();
  await page.locator('.page-actions .progress[data-op=create]').waitFor();
  await page.locator('.head-state .state', {hasText: 'ready'}).waitFor({timeout: 20000});
  assert.equal(await page.locator('.page-actions .progress').count(), 0, 'a ready sandbox shows its creation under way');
  await page.locator('.stage[data-stage=ready].stage-done').waitFor();
  const sb = await ok('GET', `/v1/sandboxes/${id}`);
  assert.deepEqual([sb.provider, sb.owner, sb.labels], ['sim', owner, {suite, team: 'ops'}]);
  const ttl = (new Date(sb.expires_at) - new Date(sb.created_at)) / 1000;
  assert.ok(Math.abs(ttl - 600) < 2, `a TTL of 600 s, got ${ttl} s`);

  // local lists the server's image: a sandbox of it has that image as its root.
  await go(page, '#/sandboxes/new');
  await page.locator('#new-provider').selectOption('local');
  await page.locator('#new-image').selectOption('tiny');
  await page.locator('#new-labels').fill(`suite=${suite}`);
  await page.getByRole('button', {name: 'Create sandbox'}).click();
  await page.waitForFunction((prev) => /^#\/sandboxes\/sbx_/.test(location.hash) && !location.hash.includes(prev), id);
  const imaged = decodeURIComponent((await page.evaluate(() => location.hash)).split('/')[2]);
  await page.locator('main h1', {hasText: imaged}).waitFor();
  await page.locator('.head-state .state', {hasText: 'ready'}).waitFor({timeout: 30000});
  const res = await ok('POST', `/v1/sandboxes/${imaged}/exec`, {body: {command: 'read -r m </etc/image-marker; echo "$m"'}});
  assert.equal(res.output, 'tether test image\n');
  for (const s of [id, imaged]) await ok('DELETE', `/v1/sandboxes/${s}`);
  await done();
});

test('run a command in a ready sandbox: its output as it comes, as text; exit code, timeout, truncation, stop', async () => {
  const suite = `exec-${RUN}`;
  const sb = await create({provider: 'local', labels: {suite}});
  const sim = await create({provider: 'sim', labels: {suite}});
  for (const s of [sb, sim]) await settled(s.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main h1', {hasText: sb.id}).waitFor();
  const command = page.locator('#exec-command');
  const output = page.locator('#exec-output');
  const result = page.locator('#exec-result');
  const run = page.getByRole('button', {name: 'Run', exact: true});

  // The first line shows while the command still runs; stderr too; then the exit code.
  await command.fill(`printf 'first <b>line</b>\\n'; sleep 2; echo second >&2; exit 3`);
  await run.click();
  await output.filter({hasText: 'first <b>line</b>'}).waitFor();
  assert.match(await page.locator('#exec-status').textContent(), /Running/);
  assert.ok(!(await output.textContent()).includes('second'), 'the output came all at once, at the end');
  await result.filter({hasText: 'exit 3'}).waitFor({timeout: 20000});
  assert.equal(await output.textContent(), 'first <b>line</b>\nsecond\n');
  assert.equal(await output.locator('.stderr').textContent(), 'second\n');
  assert.equal(await output.locator('b').count(), 0, 'output was rendered as HTML');
  assert.match(await page.locator('#exec-status').textContent(), /Finished in/);
  // It is in the activity.
  await page.locator('[aria-labelledby=sec-activity] tr[data-kind=exec]', {hasText: 'sleep 2'}).filter({hasText: 'exit 3'}).waitFor();

  // A timeout: killed, exit 124, said so.
  await command.fill('echo begun; sleep 30');
  await page.locator('#exec-timeout').fill('1');
  await run.click();
  await result.filter({hasText: 'timed out after 1 s'}).waitFor({timeout: 20000});
  assert.match(await result.textContent(), /exit 124/);
  assert.match(await output.textContent(), /^begun\n/);

  // More output than the server keeps (MAX_EXEC_OUTPUT=65536 here): cut, and said so.
  await page.locator('#exec-timeout').fill('');
  await command.fill('head -c 200000 /dev/zero | tr "\\0" x');
  await run.click();
  await result.filter({hasText: 'output truncated'}).waitFor({timeout: 20000});
  assert.match(await result.textContent(), /exit 0/);
  assert.ok((await output.textContent()).length < 100000, 'the whole output was shown');

  // Stop ends the command.
  await command.fill('echo started; sleep 60; echo not-reached');
  await run.click();
  await output.filter({hasText: 'started'}).waitFor();
  await page.getByRole('button', {name: 'Stop'}).click();
  await page.locator('#exec-status', {hasText: 'Stopped: the command was ended.'}).waitFor();
  assert.equal(await page.getByRole('button', {name: 'Stop'}).count(), 0);
  await until('the stopped command to end in the sandbox', async () =>
    !(await ok('POST', `/v1/sandboxes/${sb.id}/exec`, {body: {command: 'ps -eo args'}})).output.includes('sleep 60'));

  // A provider without exec: the API's refusal, inline.
  await go(page, `#/sandboxes/${sim.id}`);
  await page.locator('#exec-help', {hasText: 'The sim provider does not run commands'}).waitFor();
  await command.fill('true');
  await run.click();
  await page.locator('#exec-error', {hasText: 'NOT_SUPPORTED'}).waitFor();
  // A sandbox that is not ready: Run is off.
  await ok('DELETE', `/v1/sandboxes/${sim.id}`);
  await page.locator('.head-state .state', {hasText: 'terminated'}).waitFor();
  assert.equal(await run.isDisabled(), true, 'Run is offered for an ended sandbox');
  await page.locator('#exec-help', {hasText: 'this one is terminated'}).waitFor();
  await ok('DELETE', `/v1/sandboxes/${sb.id}`);
  await done();
});

test('a terminal in a ready sandbox: a shell typed into, resized with its frame, ended by exit or hung up on close', async () => {
  const suite = `term-${RUN}`;
  const sb = await create({provider: 'local', labels: {suite}});
  const sim = await create({provider: 'sim', labels: {suite}});
  for (const s of [sb, sim]) await settled(s.id);
  const {page, done} = await open();
  await signIn(page);
  await go(page, `#/sandboxes/${sb.id}`);
  await page.locator('main h1', {hasText: sb.id}).waitFor();
  const openButton = page.getByRole('button', {name: 'Open terminal'});
  const closeButton = page.getByRole('button', {name: 'Close terminal'});
  const frame = page.frameLocator('#terminal-frame');
  const status = frame.locator('#term-status');
  const screen = frame.locator('#term-screen');
  const rows = frame.locator('.xterm-rows');
  const size = () => screen.evaluate((el) => `${el.dataset.rows} ${el.dataset.cols}`);

  // The shell starts sized to the frame; what is typed runs there. (The
  // page's own script errors and CSP violations fail the test in done():
  // xterm.js draws under terminal.html's policy.)
  await openButton.click();
  await status.filter({hasText: 'Connected'}).waitFor();
  await screen.click();
  await page.keyboard.type('echo hello-$((6*7))\n');
  await rows.filter({hasText: 'hello-42'}).waitFor();
  // 24-bit colour: xterm.js writes it as a style attribute, which
  // terminal.html's policy allows (the console's would log a violation).
  await page.keyboard.type("printf '\\033[38;2;255;128;0mtrue-%s\\033[0m\\n' colour\n");
  await rows.filter({hasText: 'true-colour'}).waitFor();
  assert.match(await rows.locator('span', {hasText: 'true-colour'}).last().getAttribute('style') ?? '', /color: ?(#ff8000|rgb\(255, 128, 0\))/);
  const before = await size();
  await page.keyboard.type('echo size=$(stty size)\n');
  await rows.filter({hasText: `size=${before}`}).waitFor();

  // A smaller window makes a smaller frame: the terminal's new size reaches the shell.
  await page.setViewportSize({width: 900, height: 600});
  await until('the terminal to take the frame\'s new size', async () => (await size()) !== before);
  const after = await size();
  await page.keyboard.type('clear; echo size=$(stty size)\n');
  await rows.filter({hasText: `size=${after}`}).waitFor();

  // exit ends it, with its code.
  const pid = Number(await screen.getAttribute('data-pid'));
  await page.keyboard.type('exit 3\n');
  await status.filter({hasText: 'The shell exited with code 3.'}).waitFor();
  const exited = await ok('GET', `/v1/sandboxes/${sb.id}/processes/${pid}`);
  assert.equal(exited.exit?.code, 3);
  assert.ok(exited.pty, 'the shell had no terminal');
  // Each session is in the activity, with what was typed.
  await page.locator('[aria-labelledby=sec-activity] tr[data-kind=terminal]', {hasText: 'echo hello-$((6*7))'}).waitFor({timeout: 20000});

  // Closing the terminal hangs up a shell still running.
  await closeButton.click();
  await openButton.click();
  await status.filter({hasText: 'Connected'}).waitFor();
  const second = Number(await screen.getAttribute('data-pid'));
  assert.notEqual(second, pid);
  await closeButton.click();
  assert.equal(await page.locator('#terminal-frame').count(), 0);
  const hungUp = await until('the closed terminal\'s shell to end', async () => {
    const p = await ok('GET', `/v1/sandboxes/${sb.id}/processes/${second}`);
    return p.running ? null : p;
  });
  assert.equal(hungUp.exit.signal, 1, `the shell ended otherwise than by SIGHUP: ${JSON.stringify(hungUp.exit)}`);

  // A provider without terminals: said beforehand, and the API's refusal in the frame.
  await go(page, `#/sandboxes/${sim.id}`);
  await page.locator('#terminal-help', {hasText: 'The sim provider has no terminals'}).waitFor();
  await openButton.click();
  await status.filter({hasText: 'NOT_SUPPORTED'}).waitFor();
  // A sandbox that is not ready: no terminal.
  await ok('DELETE', `/v1/sandboxes/${sim.id}`);
  await page.locator('.head-state .state', {hasText: 'terminated'}).waitFor();
  await page.locator('#terminal-help', {hasText: 'this one is terminated'}).waitFor();
  await ok('DELETE', `/v1/sandboxes/${sb.id}`);
  await done();
});

test('screenshots: desktop and phone, every page fitting the phone\'s width', async () => {
  // A tenant of its own kind of traffic: tenant B, so that the pictures show
  // a readable set rather than the other tests' sandboxes.
  const made = [];
  const mk = async (body) => { const s = await create(body, OTHER); made.push(s.id); return s; };
  // First, a pool (one of its members claimed) and an endpoint for
  // failures and ends, whose receiver stops answering 2xx midway, so that
  // the endpoint shows a failed delivery.
  await ok('POST', '/v1/pools', {body: {name: 'python', provider: 'sim', min_ready: 3, max_size: 4}, key: OTHER});
  await until('the pool to fill', async () => (await ok('GET', '/v1/pools/python', {key: OTHER})).ready === 3, 30000);
  const claimed = await ok('POST', '/v1/sandboxes', {body: {pool: 'python', owner: 'agent-42', labels: {team: 'search'}}, key: OTHER});
  made.push(claimed.id);
  await until('the pool to refill before the rest', async () => (await ok('GET', '/v1/pools/python', {key: OTHER})).ready === 3, 30000);
  const rx = await receiver();
  const hook = (await ok('POST', '/v1/webhooks', {body: {url: rx.url, description: 'ops alerts', events: {states: ['failed', 'terminated']}}, key: OTHER})).webhook;
  const agent = await mk({provider: 'local', owner: 'agent-42', labels: {team: 'search', task: 'index-build'},
    params: {network: 'allowlist', allow: ['pypi.org', '*.pythonhosted.org', 'github.com:443']}});
  await mk({provider: 'sim', owner: 'agent-42', labels: {team: 'search'}});
  const slow = await mk({provider: 'sim', owner: 'agent-7', labels: {team: 'ml'}, params: {create_delay_ms: 600000}});
  await mk({provider: 'sim', labels: {team: 'ml'}, params: {fail: 'create'}});
  const gone = await mk({provider: 'sim', owner: 'agent-7', labels: {team: 'ml'}});
  const napping = await mk({provider: 'sim', owner: 'agent-7', labels: {team: 'ml', task: 'eval'}});
  for (const id of made) if (id !== slow.id) await settled(id, OTHER);
  await ok('POST', `/v1/sandboxes/${napping.id}/pause?wait=30s`, {key: OTHER});
  await ok('PUT', '/v1/owners/agent-42/lease', {body: {ttl_seconds: 300}, key: OTHER});
  await ok('PUT', '/v1/owners/agent-7/lease', {body: {ttl_seconds: 45}, key: OTHER});
  await ok('POST', `/v1/sandboxes/${agent.id}/exec`, {body: {command: 'python3 -c "print(6*7)"'}, key: OTHER});
  await ok('PUT', `/v1/sandboxes/${agent.id}/files?path=${encodeURIComponent('/workspace/main.py')}`, {raw: 'print("hi")\n', key: OTHER});
  await ok('POST', `/v1/sandboxes/${agent.id}/exec`, {body: {command: 'python3 /workspace/main.py && pytest -q'}, key: OTHER});
  // A preview of a page the agent serves, opened once.
  // (The exec waits for the server to listen, so that the activity shows no refused tries.)
  const listen = `python3 -c "import socket,time
for _ in range(100):
    try: socket.create_connection(('127.0.0.1', 8000)); break
    except OSError: time.sleep(0.1)"`;
  await ok('POST', `/v1/sandboxes/${agent.id}/exec`, {body: {command: `cd /workspace && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && ${listen}`}, key: OTHER});
  const shared = await ok('POST', `/v1/sandboxes/${agent.id}/previews`, {body: {port: 8000, ttl_seconds: 3600}, key: OTHER});
  assert.equal((await fetch(shared.url + 'main.py')).status, 200);
  await until('the failed create delivered', async () => rx.got.some((g) => g.status === 204), 20000);
  rx.answer(503);
  await ok('DELETE', `/v1/sandboxes/${gone.id}`, {key: OTHER});
  await released(gone.id, OTHER);
  await until('a failed attempt', async () => rx.got.some((g) => g.status === 503), 20000);

  const dir = SHOTS ?? await mkdtemp(join(tmpdir(), 'console-shots-'));
  await mkdir(dir, {recursive: true});
  const pages = [['sandboxes', '#/sandboxes'], ['sandbox', `#/sandboxes/${agent.id}`], ['pool', '#/pools/python'], ['webhook', `#/webhooks/${hook.id}`],
    ['attention', '#/attention'], ['owners', '#/owners'], ['providers', '#/providers'], ['keys', '#/keys'], ['pools', '#/pools'], ['webhooks', '#/webhooks'],
    ['paused', `#/sandboxes/${napping.id}`], ['new', '#/sandboxes/new']];
  try {
    const desktop = await open({viewport: {width: 1280, height: 800}});
    await signIn(desktop.page, OTHER);
    await desktop.page.locator('#live[data-status=live]').waitFor();
    for (const [name, hash] of pages.slice(0, 4)) {
      await go(desktop.page, hash);
      await desktop.page.locator('main .table-wrap').first().waitFor();
      if (name === 'sandbox') {
        // A command run from the console, its output shown.
        await desktop.page.locator('#exec-command').fill('python3 /workspace/main.py && ls /workspace');
        await desktop.page.getByRole('button', {name: 'Run', exact: true}).click();
        await desktop.page.locator('#exec-result', {hasText: 'exit 0'}).waitFor({timeout: 20000});
        await desktop.page.locator('[aria-labelledby=sec-activity] tr[data-kind=exec]', {hasText: 'ls /workspace'}).waitFor();
        // A terminal open on it, a command typed there.
        await desktop.page.getByRole('button', {name: 'Open terminal'}).click();
        const term = desktop.page.frameLocator('#terminal-frame');
        await term.locator('#term-status').filter({hasText: 'Connected'}).waitFor();
        await term.locator('#term-screen').click();
        await desktop.page.keyboard.type('python3 -c "print(6*7)"\n');
        await term.locator('.xterm-rows').filter({hasText: '42'}).waitFor();
        await desktop.page.locator('[aria-labelledby=sec-network] #network-entries li', {hasText: 'pypi.org'}).waitFor();
      }
      await desktop.page.waitForTimeout(300);
      await desktop.page.screenshot({path: join(dir, `${name}.png`), fullPage: true});
    }
    await desktop.done();
    // Needs attention as tenant A, which the tests above gave something to show.
    const a = await open({viewport: {width: 1280, height: 800}});
    await signIn(a.page);
    await go(a.page, '#/attention?unreleased=0&window=24');
    await a.page.locator('[aria-labelledby=sec-reconciliation] .table-wrap').waitFor();
    await a.page.waitForTimeout(300);
    await a.page.screenshot({path: join(dir, 'attention.png'), fullPage: true});
    await a.done();

    const phone = await open({viewport: {width: 390, height: 844}, deviceScaleFactor: 2, isMobile: true, hasTouch: true});
    await signIn(phone.page, OTHER);
    for (const [name, hash] of pages) {
      await go(phone.page, hash);
      await phone.page.locator('main h1').waitFor();
      await phone.page.locator('main .table-wrap, main .cards, main form.stack').first().waitFor();
      await phone.page.waitForTimeout(200);
      await noOverflow(phone.page, `${name} at 390px`);
      if (name === 'sandbox') await phone.page.evaluate(() => document.getElementById('sec-lease').scrollIntoView({block: 'start'}));
      if (name === 'sandboxes' || name === 'sandbox') await phone.page.screenshot({path: join(dir, `phone-${name}.png`)});
    }
    await phone.done();
  } finally {
    if (!SHOTS) await rm(dir, {recursive: true, force: true});
    await call('DELETE', `/v1/webhooks/${hook.id}`, {key: OTHER});
    await call('DELETE', '/v1/pools/python', {key: OTHER});
    await rx.close();
    for (const id of made) await call('DELETE', `/v1/sandboxes/${id}`, {key: OTHER});
  }
});
