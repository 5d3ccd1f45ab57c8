// The real e2b SDK (pinned in package.json) against a live Tether: the
// environment names the E2B face (E2B_API_URL=$TETHER/e2b,
// E2B_SANDBOX_URL=$TETHER/e2b/envd, E2B_API_KEY=<a Tether key>) and, for
// the checks through Tether's own API, TETHER_URL and TETHER_API_KEY;
// TETHER_E2B_DOMAIN is the server's E2B_DOMAIN (its sandbox hosts).
import { test } from 'node:test'
import { spawn } from 'node:child_process'
import http from 'node:http'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, NotFoundError, FileNotFoundError, ALL_TRAFFIC } from 'e2b'

const tether = process.env.TETHER_URL
const key = process.env.TETHER_API_KEY
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'TETHER_URL', 'TETHER_API_KEY', 'TETHER_E2B_DOMAIN']) {
  if (!process.env[v]) throw new Error(`${v} is not set`)
}

// v1 calls Tether's own API.
async function v1(method, path, body) {
  const res = await fetch(tether + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : undefined }
}

test('create base, run a command, and the sandbox is an ordinary Tether sandbox', async () => {
  const sbx = await Sandbox.create('base', { metadata: { suite: 'e2b', run: 'one' }, envs: { GREETING: 'hi' } })
  try {
    const r = await sbx.commands.run('echo ok')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'ok\n')
    const env = await sbx.commands.run('echo "$GREETING $PER_CMD"', { envs: { PER_CMD: 'there' } })
    assert.equal(env.stdout, 'hi there\n')
    const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
    assert.equal(cwd.stdout, '/tmp\n')
    const mine = await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)
    assert.equal(mine.status, 200)
    assert.equal(mine.body.state, 'ready')
    assert.equal(mine.body.labels.suite, 'e2b')
    assert.equal(mine.body.labels['e2b.template'], 'base')
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { suite: 'e2b', run: 'one' })
  } finally {
    await sbx.kill()
  }
})

test('a failing command throws with its exit code and output', async () => {
  const sbx = await Sandbox.create()
  try {
    await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (err) => {
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'bad\n')
      return true
    })
  } finally {
    await sbx.kill()
  }
})

test('a background command streams its output, is listed, takes stdin and is killed', async () => {
  const sbx = await Sandbox.create()
  try {
    const seen = []
    const h = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done; sleep 30', {
      background: true,
      onStdout: (d) => seen.push(d),
    })
    assert.ok(h.pid > 0)
    const deadline = Date.now() + 10_000
    while (!seen.join('').includes('line3') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    assert.equal(seen.join(''), 'line1\nline2\nline3\n')
    const list = await sbx.commands.list()
    assert.ok(list.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(list)}`)
    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait())
    assert.equal(await sbx.commands.kill(999999), false)

    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'typed\n')
    await sbx.commands.closeStdin(cat.pid)
    const done = await cat.wait()
    assert.equal(done.stdout, 'typed\n')

    const late = await sbx.commands.run('sleep 1; echo later', { background: true })
    const again = await sbx.commands.connect(late.pid)
    const res = await again.wait()
    assert.equal(res.stdout, 'later\n')
  } finally {
    await sbx.kill()
  }
})

test("process calls are in the sandbox's activity, as /v1's are", async () => {
  const sbx = await Sandbox.create()
  try {
    const h = await sbx.commands.run('cat; echo done-$((6*7))', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'audited input\n')
    await sbx.commands.closeStdin(h.pid)
    assert.equal((await h.wait()).stdout, 'audited input\ndone-42\n')
    const sleeper = await sbx.commands.run('sleep 30', { background: true })
    assert.equal(await sbx.commands.kill(sleeper.pid), true)
    await assert.rejects(sleeper.wait())

    const act = await v1('GET', `/v1/sandboxes/${sbx.sandboxId}/activity`)
    assert.equal(act.status, 200)
    const seen = JSON.stringify(act.body.items)
    const start = act.body.items.find((a) => a.kind === 'process_start' && a.pid === h.pid)
    assert.ok(start, `no process_start of ${h.pid} in ${seen}`)
    assert.ok(start.command.includes('cat; echo done-$((6*7))'), start.command)
    assert.equal(start.error, null)
    const input = act.body.items.filter((a) => a.kind === 'process_input' && a.pid === h.pid)
    assert.deepEqual(input.map((a) => [a.input, a.bytes]), [['audited input\n', 14], ['', 0]], seen)
    assert.ok(act.body.items.some((a) => a.kind === 'process_start' && a.pid === sleeper.pid && a.command.includes('sleep 30')), seen)
    const sig = act.body.items.find((a) => a.kind === 'process_signal' && a.pid === sleeper.pid)
    assert.ok(sig, `no process_signal of ${sleeper.pid} in ${seen}`)
    assert.equal(sig.signal, 'KILL')
  } finally {
    await sbx.kill()
  }
})

test('files: write, read, list, stat, make a folder, rename, remove', async () => {
  const sbx = await Sandbox.create()
  try {
    const info = await sbx.files.write('/workspace/a/hello.txt', 'hello e2b')
    assert.equal(info.path, '/workspace/a/hello.txt')
    assert.equal(await sbx.files.read('/workspace/a/hello.txt'), 'hello e2b')
    const bytes = await sbx.files.read('/workspace/a/hello.txt', { format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), 'hello e2b')
    await sbx.files.write([
      { path: '/workspace/a/one.txt', data: '1' },
      { path: '/workspace/a/two.txt', data: '22' },
    ])
    const names = (await sbx.files.list('/workspace/a')).map((e) => `${e.name}:${e.type}:${e.size}`).sort()
    assert.deepEqual(names, ['hello.txt:file:9', 'one.txt:file:1', 'two.txt:file:2'])
    assert.equal(await sbx.files.makeDir('/workspace/a/sub'), true)
    assert.equal(await sbx.files.makeDir('/workspace/a/sub'), false)
    await sbx.files.write('/workspace/a/sub/deep.txt', 'd', { gzip: true })
    const deep = (await sbx.files.list('/workspace/a', { depth: 2 })).map((e) => e.path).sort()
    assert.ok(deep.includes('/workspace/a/sub/deep.txt'), JSON.stringify(deep))
    const st = await sbx.files.getInfo('/workspace/a/sub')
    assert.equal(st.type, 'dir')
    const moved = await sbx.files.rename('/workspace/a/one.txt', '/workspace/b/uno.txt')
    assert.equal(moved.path, '/workspace/b/uno.txt')
    assert.equal(await sbx.files.exists('/workspace/a/one.txt'), false)
    assert.equal(await sbx.files.exists('/workspace/b/uno.txt'), true)
    await sbx.files.remove('/workspace/b')
    assert.equal(await sbx.files.exists('/workspace/b'), false)
    await assert.rejects(sbx.files.read('/workspace/missing.txt'), FileNotFoundError)
    await assert.rejects(sbx.files.list('/workspace/missing'), FileNotFoundError)
  } finally {
    await sbx.kill()
  }
})

test('setTimeout, connect and list; kill is final', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, metadata: { suite: 'e2b', run: 'list' } })
  const before = (await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.expires_at
  await sbx.setTimeout(600_000)
  const after = (await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.expires_at
  assert.ok(new Date(after) > new Date(before), `${after} is not after ${before}`)

  const same = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await same.commands.run('echo again')).stdout, 'again\n')

  const page = await Sandbox.list({ query: { metadata: { run: 'list' } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  const running = await Sandbox.list({ query: { state: ['running'], metadata: { suite: 'e2b' } } }).nextItems()
  assert.ok(running.some((s) => s.sandboxId === sbx.sandboxId))

  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  const v1view = await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)
  assert.equal(v1view.body.state, 'terminated')
})

test('lists page with a next token', async () => {
  const made = []
  try {
    for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ metadata: { run: 'pages' } }))
    const p = Sandbox.list({ limit: 2, query: { metadata: { run: 'pages' } } })
    const first = await p.nextItems()
    assert.equal(first.length, 2)
    assert.equal(p.hasNext, true)
    const second = await p.nextItems()
    assert.equal(second.length, 1)
    assert.deepEqual([...first, ...second].map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort())
  } finally {
    for (const s of made) await s.kill()
  }
})

test('a /v1 sandbox is reached with Sandbox.connect', async () => {
  const made = await v1('POST', '/v1/sandboxes?wait=60s', { labels: { suite: 'e2b' } })
  assert.ok(made.status === 201 || made.status === 202, JSON.stringify(made))
  const id = made.body.id
  try {
    const sbx = await Sandbox.connect(id)
    assert.equal((await sbx.commands.run('echo from-v1')).stdout, 'from-v1\n')
  } finally {
    await v1('DELETE', `/v1/sandboxes/${id}`)
  }
})

test('errors: an unknown sandbox is 404, a bad body 400, a bad key 401', async () => {
  await assert.rejects(Sandbox.connect('sbx_00000000000000000000000000'), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo('not-an-id'), SandboxNotFoundError)
  assert.equal(await Sandbox.kill('sbx_00000000000000000000000000'), false)
  await assert.rejects(Sandbox.create('no-such-template'), (err) => {
    assert.match(err.message, /404/)
    return true
  })
  const base = process.env.E2B_API_URL
  const bad = await fetch(`${base}/v2/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
    body: '{"templateID": 5}',
  })
  assert.equal(bad.status, 400)
  const badBody = await bad.json()
  assert.equal(badBody.code, 400)
  assert.equal(typeof badBody.message, 'string')
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_0123456789abcdef' }), (err) => {
    assert.match(err.message, /Unauthorized/)
    return true
  })
})

// until polls check every 50 ms until it is true, failing after ms.
async function until(what, check, ms = 10_000) {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

test('pause, and connect resumes: files and running processes are kept', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('/workspace/kept.txt', 'kept')
    const bg = await sbx.commands.run('sleep 600', { background: true })
    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.pause(), false, 'a second pause is a 409, false')
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.state, 'paused')
    assert.equal(await sbx.isRunning(), false)
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId))

    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
    assert.equal((await again.getInfo()).state, 'running')
    assert.equal(await again.isRunning(), true)
    assert.equal(await again.files.read('/workspace/kept.txt'), 'kept')
    assert.ok((await again.commands.list()).some((p) => p.pid === bg.pid), 'the background process outlived the pause')
    assert.equal((await again.commands.run('echo resumed')).stdout, 'resumed\n')
    const end = new Date((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.expires_at)
    assert.ok(end - Date.now() > 200_000, `connect lengthened the timeout to 300 s: ends ${end.toISOString()}`)

    // Connect never shortens a timeout.
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
    const still = new Date((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.expires_at)
    assert.ok(still >= end, `connect shortened the timeout: ${still.toISOString()} < ${end.toISOString()}`)

    await assert.rejects(Sandbox.pause('sbx_00000000000000000000000000'), SandboxNotFoundError)
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.pause(sbx.sandboxId), SandboxNotFoundError)
})

test('refresh lengthens the timeout, never shortens it', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 30_000 })
  const refresh = (id, body) =>
    fetch(`${process.env.E2B_API_URL}/sandboxes/${id}/refreshes`, {
      method: 'POST',
      headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
  const expiry = async () => new Date((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.expires_at)
  try {
    const before = await expiry()
    assert.equal((await refresh(sbx.sandboxId, { duration: 600 })).status, 204)
    const after = await expiry()
    assert.ok(after - before > 500_000, `${after.toISOString()} is not 600 s on`)
    assert.equal((await refresh(sbx.sandboxId, { duration: 5 })).status, 204)
    assert.equal((await expiry()).getTime(), after.getTime(), 'a shorter refresh changed nothing')
    assert.equal((await refresh(sbx.sandboxId)).status, 204, 'a refresh without a body')
    const bad = await refresh(sbx.sandboxId, { duration: 99999 })
    assert.equal(bad.status, 400)
    assert.equal((await bad.json()).code, 400)
    assert.equal((await expiry()).getTime(), after.getTime(), 'a refused refresh wrote nothing')
    assert.equal((await refresh('sbx_00000000000000000000000000', { duration: 60 })).status, 404)
  } finally {
    await sbx.kill()
  }
})

test('a PTY: create, input, resize, kill', async () => {
  const sbx = await Sandbox.create()
  try {
    let out = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d)) })
    assert.ok(term.pid > 0)
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo "pty-$((6*7))"\n'))
    await until('the terminal to answer', () => out.includes('pty-42'))
    assert.match(out, /24 80/)
    await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
    await until('the new size', () => out.includes('40 120'))
    assert.ok((await sbx.commands.list()).some((p) => p.pid === term.pid))
    assert.equal(await sbx.pty.kill(term.pid), true)
    await assert.rejects(term.wait())
    assert.equal(await sbx.pty.kill(term.pid), false, 'a killed PTY is not found')
    await assert.rejects(sbx.pty.resize(999999, { cols: 10, rows: 10 }))
    await assert.rejects(sbx.pty.sendInput(999999, new TextEncoder().encode('x')))
  } finally {
    await sbx.kill()
  }
})

test('watch a folder: its changes stream, recursive or not, until stopped', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.makeDir('/workspace/w/sub')
    const flat = []
    const deep = []
    const h1 = await sbx.files.watchDir('/workspace/w', (e) => flat.push(`${e.type}:${e.name}`))
    const h2 = await sbx.files.watchDir('/workspace/w', (e) => deep.push(`${e.type}:${e.name}`), { recursive: true })
    await sbx.files.write('/workspace/w/top.txt', 'x')
    await sbx.files.write('/workspace/w/sub/low.txt', 'y')
    await sbx.files.remove('/workspace/w/top.txt')
    await until('the events', () => flat.includes('remove:top.txt') && deep.some((e) => e.endsWith(':sub/low.txt')))
    assert.ok(flat.some((e) => e === 'create:top.txt' || e === 'write:top.txt'), JSON.stringify(flat))
    assert.ok(!flat.some((e) => e.includes('low.txt')), `not recursive: ${JSON.stringify(flat)}`)
    await h1.stop()
    const seen = flat.length
    await sbx.files.write('/workspace/w/after.txt', 'z')
    await until('the recursive watch', () => deep.some((e) => e.endsWith(':after.txt')))
    assert.equal(flat.length, seen, 'a stopped watch sends nothing')
    await h2.stop()
    await assert.rejects(sbx.files.watchDir('/workspace/missing', () => {}), NotFoundError)
  } finally {
    await sbx.kill()
  }
})

test('an E2B program SIGKILLed while it holds an owner-bound sandbox loses it within the lease and one interval', async () => {
  const ttl = Number(process.env.TETHER_OWNER_TTL_SECONDS)
  const interval = Number(process.env.TETHER_JANITOR_INTERVAL_SECONDS)
  assert.ok(ttl > 0 && interval > 0, 'TETHER_OWNER_TTL_SECONDS and TETHER_JANITOR_INTERVAL_SECONDS are set')
  const owner = `e2b-holder-${process.pid}`
  const holder = spawn(process.execPath, [new URL('./holder.mjs', import.meta.url).pathname], {
    env: { ...process.env, HOLDER_OWNER: owner, HOLDER_TTL_SECONDS: String(ttl) },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  try {
    const id = await new Promise((resolve, reject) => {
      let out = ''
      holder.stdout.on('data', (d) => {
        out += d
        if (out.includes('\n')) resolve(out.trim())
      })
      holder.on('exit', (code) => reject(new Error(`the holder ended (${code}) before its sandbox was made`)))
    })
    const sb = (await v1('GET', `/v1/sandboxes/${id}`)).body
    assert.equal(sb.owner, owner)
    assert.equal(sb.state, 'ready')
    // Alive past two leases: the heartbeat holds it.
    await new Promise((r) => setTimeout(r, 2 * ttl * 1000))
    assert.equal((await v1('GET', `/v1/sandboxes/${id}`)).body.state, 'ready')

    holder.kill('SIGKILL')
    const killed = Date.now()
    let ended
    await until('the sandbox to end', async () => {
      ended = (await v1('GET', `/v1/sandboxes/${id}`)).body
      return ended.state === 'terminated'
    }, 60_000)
    const took = (Date.now() - killed) / 1000
    assert.equal(ended.reason, 'owner_expired')
    // The lease, one janitor interval, and slack for a loaded machine.
    assert.ok(took <= ttl + interval + 3, `the sandbox outlived its owner by ${took} s`)
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
  } finally {
    holder.kill('SIGKILL')
  }
})

test('the Tether-Owner header binds a create to an owner; a bad owner writes nothing', async () => {
  const owner = `e2b-header-${process.pid}`
  const sbx = await Sandbox.create({ headers: { 'Tether-Owner': owner }, metadata: { run: owner } })
  try {
    assert.equal((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.owner, owner)
    assert.equal((await sbx.getInfo()).metadata['tether.owner'], owner)
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.create({ metadata: { 'tether.owner': 'pool:not-yours', run: 'bad-owner' } }), /400/)
  const none = await v1('GET', '/v1/sandboxes?label=run=bad-owner')
  assert.deepEqual(none.body.items, [])
})

test('a create cancelled mid-way leaves nothing', async () => {
  // A template that is a pool of slow simulated sandboxes, empty: the
  // create falls back to one that takes 30 s, and the caller gives up
  // once Tether is making it.
  const pool = await v1('POST', '/v1/pools', {
    name: 'e2b-slow', provider: 'sim', params: { create_delay_ms: 30000 }, min_ready: 0, max_size: 1,
  })
  assert.equal(pool.status, 201, JSON.stringify(pool.body))
  const run = `cancelled-${process.pid}-${Date.now()}`
  try {
    // The SDK's own create, sent as it sends it, by a caller that can go
    // away on cue: the SDK 2.51.0 on Node 20 passes neither requestTimeoutMs
    // nor an AbortController's signal on to its create (only an
    // AbortSignal.timeout), so it cannot be cut at a chosen moment.
    const abort = new AbortController()
    const creating = fetch(`${process.env.E2B_API_URL}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'e2b-slow', metadata: { run } }),
      signal: abort.signal,
    })
    let made
    await until('the sandbox to be creating', async () => {
      made = (await v1('GET', `/v1/sandboxes?label=run=${run}`)).body.items
      return made.length > 0 && made[0].state === 'creating'
    }, 30_000)
    abort.abort()
    await assert.rejects(creating)
    assert.equal(made.length, 1, JSON.stringify(made))
    let sb
    await until('the sandbox to be released', async () => {
      sb = (await v1('GET', `/v1/sandboxes/${made[0].id}`)).body
      return sb.released === true
    }, 30_000)
    assert.ok(['cancelled', 'terminated'].includes(sb.state), `state ${sb.state}`)
    assert.equal(sb.ready_at ?? null, null, 'it was never handed out')
    const live = await v1('GET', `/v1/sandboxes?label=run=${run}&released=false`)
    assert.deepEqual(live.body.items, [])
  } finally {
    await v1('DELETE', '/v1/pools/e2b-slow')
  }
})

test('polled watchers: create, get the events since the last poll, remove', async () => {
  const sbx = await Sandbox.create()
  // The Connect JSON unary calls E2B's Python SDK makes for these (the JS
  // SDK streams WatchDir instead).
  const rpc = async (method, body, id = sbx.sandboxId) => {
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/${method}`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
        'E2b-Sandbox-Id': id, 'X-Access-Token': key,
      },
      body: JSON.stringify(body),
    })
    return { status: res.status, body: await res.json() }
  }
  try {
    await sbx.files.makeDir('/workspace/p/sub')
    const made = await rpc('CreateWatcher', { path: '/workspace/p' })
    assert.equal(made.status, 200, JSON.stringify(made.body))
    const id = made.body.watcherId
    assert.ok(id)
    const deep = (await rpc('CreateWatcher', { path: 'p', recursive: true })).body.watcherId
    await sbx.files.write('/workspace/p/a.txt', 'a')
    await sbx.files.write('/workspace/p/sub/b.txt', 'b')
    let flat = []
    let all = []
    await until('the events', async () => {
      flat.push(...((await rpc('GetWatcherEvents', { watcherId: id })).body.events ?? []))
      all.push(...((await rpc('GetWatcherEvents', { watcherId: deep })).body.events ?? []))
      return flat.some((e) => e.name === 'a.txt') && all.some((e) => e.name === 'sub/b.txt')
    })
    assert.ok(flat.some((e) => e.name === 'a.txt' && e.type === 'EVENT_TYPE_CREATE'), JSON.stringify(flat))
    assert.ok(!flat.some((e) => e.name.includes('b.txt')), `not recursive: ${JSON.stringify(flat)}`)
    const again = await rpc('GetWatcherEvents', { watcherId: id })
    assert.deepEqual(again.body.events ?? [], [], 'a poll takes the events it answers')

    assert.equal((await rpc('RemoveWatcher', { watcherId: id })).status, 200)
    const gone = await rpc('GetWatcherEvents', { watcherId: id })
    assert.equal(gone.status, 404)
    assert.equal(gone.body.code, 'not_found')
    assert.equal((await rpc('RemoveWatcher', { watcherId: id })).status, 404)
    assert.equal((await rpc('GetWatcherEvents', { watcherId: 'wch_nope' })).status, 404)
    const missing = await rpc('CreateWatcher', { path: '/workspace/missing' })
    assert.equal(missing.status, 404, JSON.stringify(missing.body))
    const file = await rpc('CreateWatcher', { path: '/workspace/p/a.txt' })
    assert.equal(file.status, 400, JSON.stringify(file.body))

    // Another sandbox does not see this one's watcher.
    const other = await Sandbox.create()
    try {
      assert.equal((await rpc('GetWatcherEvents', { watcherId: deep }, other.sandboxId)).status, 404)
    } finally {
      await other.kill()
    }
    // A watcher of a sandbox that ended says so, then is gone.
    await sbx.kill()
    assert.notEqual((await rpc('GetWatcherEvents', { watcherId: deep })).status, 200)
  } finally {
    await sbx.kill()
  }
})

// hostFetch requests url, a URL of a sandbox host (getHost's), at Tether's
// own address with the sandbox host as its Host, as a wildcard DNS name of
// E2B_DOMAIN pointing at Tether would send it. (Node's fetch sets Host
// from the URL, whatever the headers say: node:http does not.)
function hostFetch(url, headers = {}) {
  const u = new URL(url)
  const to = new URL(tether)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: to.hostname, port: to.port, path: u.pathname + u.search, headers: { ...headers, Host: u.host } },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (d) => (body += d))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
      }
    )
    req.on('error', reject)
    req.end()
  })
}

test('getHost reaches a port of the sandbox: key-less by default, with the traffic access token when public traffic is off', async () => {
  const domain = process.env.TETHER_E2B_DOMAIN
  const pub = await Sandbox.create()
  const priv = await Sandbox.create({ network: { allowPublicTraffic: false } })
  const made = await v1('POST', '/v1/sandboxes?wait=60s', { labels: { suite: 'e2b' } })
  assert.ok(made.status === 201 || made.status === 202, JSON.stringify(made))
  try {
    for (const s of [pub, priv]) {
      await s.commands.run(`mkdir -p /tmp/www && printf 'hello from %s' ${s.sandboxId} > /tmp/www/hello.txt`)
      await s.commands.run('cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1', { background: true })
    }
    const host = pub.getHost(8000)
    assert.equal(host, `8000-${pub.sandboxId}.${domain}`)
    assert.equal(pub.sandboxDomain, domain)
    assert.equal(pub.trafficAccessToken, undefined)
    let r
    await until('the server in the sandbox', async () => (r = await hostFetch(`http://${host}/hello.txt`)).status === 200, 20_000)
    assert.equal(r.body, `hello from ${pub.sandboxId}`)
    // Tether's credentials never reach the app: the SDK's envd access
    // token (Tether's API key here), which the code-interpreter SDK sends
    // to every port, a bearer key, a traffic access token.
    await pub.files.write('/tmp/headers.py', [
      'import http.server as h',
      'class H(h.BaseHTTPRequestHandler):',
      '    def do_GET(s):',
      '        b = str(s.headers).encode()',
      '        s.send_response(200); s.send_header("Content-Length", str(len(b))); s.end_headers(); s.wfile.write(b)',
      'h.HTTPServer(("127.0.0.1", 8002), H).serve_forever()',
    ].join('\n'))
    await pub.commands.run('exec python3 /tmp/headers.py', { background: true })
    const sent = { 'X-Access-Token': key, Authorization: `Bearer ${key}`, 'e2b-traffic-access-token': 'tta_x', 'X-App': 'kept' }
    await until('the headers server', async () => (r = await hostFetch(`http://${pub.getHost(8002)}/`, sent)).status === 200, 20_000)
    assert.match(r.body, /X-App: kept/i)
    assert.doesNotMatch(r.body, /x-access-token|authorization|e2b-traffic-access-token/i)
    assert.ok(!r.body.includes(key), r.body)

    // Public traffic off: the token the create answered, which connect
    // answers again, and nothing else.
    const token = priv.trafficAccessToken
    assert.match(token, /^tta_/)
    const phost = priv.getHost(8000)
    r = await hostFetch(`http://${phost}/hello.txt`)
    assert.equal(r.status, 403)
    assert.match(JSON.parse(r.body).message, /'e2b-traffic-access-token' is missing/)
    r = await hostFetch(`http://${phost}/hello.txt`, { 'e2b-traffic-access-token': token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A') })
    assert.equal(r.status, 403)
    assert.match(JSON.parse(r.body).message, /is invalid/)
    await until('the private server', async () => (r = await hostFetch(`http://${phost}/hello.txt`, { 'e2b-traffic-access-token': token })).status === 200, 20_000)
    assert.equal(r.body, `hello from ${priv.sandboxId}`)
    const again = await Sandbox.connect(priv.sandboxId)
    assert.equal(again.trafficAccessToken, token)
    assert.equal(again.getHost(8000), phost)

    // Every request that reached the port is in the sandbox's activity.
    const act = await v1('GET', `/v1/sandboxes/${pub.sandboxId}/activity`)
    assert.ok(
      act.body.items.some((a) => a.kind === 'e2b_host' && a.port === 8000 && a.request === 'GET /hello.txt' && a.http_status === 200 && a.key_id === null),
      JSON.stringify(act.body.items)
    )

    // What does not reach an app: a /v1 sandbox, an unknown one, a port
    // nothing listens on, hosts that are not a sandbox's port.
    const v1sbx = await Sandbox.connect(made.body.id)
    r = await hostFetch(`http://${v1sbx.getHost(8000)}/`)
    assert.equal(r.status, 502)
    assert.deepEqual(JSON.parse(r.body), { sandboxId: made.body.id, message: 'The sandbox was not found', code: 502 })
    r = await hostFetch(`http://8000-sbx_00000000000000000000000000.${domain}/`)
    assert.equal(r.status, 502)
    r = await hostFetch(`http://${pub.getHost(8001)}/`)
    assert.equal(r.status, 502)
    assert.deepEqual(JSON.parse(r.body), { sandboxId: pub.sandboxId, message: 'The sandbox is running but port is not open', port: 8001, code: 502 })
    for (const [bad, want] of [
      [`70000-${pub.sandboxId}.${domain}`, 'Invalid sandbox port'],
      [`8000-nope.${domain}`, 'Invalid sandbox ID'],
      [`www.${domain}`, 'Invalid host'],
    ]) {
      r = await hostFetch(`http://${bad}/`)
      assert.equal(r.status, 400, bad)
      assert.equal(r.body.trim(), want, bad)
    }
  } finally {
    await pub.kill()
    await priv.kill()
    await v1('DELETE', `/v1/sandboxes/${made.body.id}`)
  }
  // An ended sandbox is not found.
  const r = await hostFetch(`http://${pub.getHost(8000)}/hello.txt`)
  assert.equal(r.status, 502)
})

test('egress: allowInternetAccess false, allowOut with the rest denied, and updateNetwork are the allow list', async () => {
  const closed = await Sandbox.create({ allowInternetAccess: false, metadata: { suite: 'e2b-egress' } })
  try {
    const net = await v1('GET', `/v1/sandboxes/${closed.sandboxId}/network`)
    assert.equal(net.status, 200)
    assert.notEqual(net.body.network, 'allowlist') // no way out at all: Tether's default
  } finally {
    await closed.kill()
  }

  const sbx = await Sandbox.create({ network: { allowOut: ['example.test', '*.pythonhosted.org'], denyOut: [ALL_TRAFFIC] }, metadata: { suite: 'e2b-egress' } })
  try {
    let net = await v1('GET', `/v1/sandboxes/${sbx.sandboxId}/network`)
    assert.equal(net.body.network, 'allowlist')
    assert.deepEqual(net.body.allow, ['example.test', '*.pythonhosted.org'])

    await sbx.updateNetwork({ allowOut: ['pypi.org'], denyOut: ({ allTraffic }) => [allTraffic] })
    net = await v1('GET', `/v1/sandboxes/${sbx.sandboxId}/network`)
    assert.deepEqual(net.body.allow, ['pypi.org'])
    assert.equal(net.body.edited, true)
    await sbx.updateNetwork({ allowInternetAccess: false })
    assert.deepEqual((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}/network`)).body.allow, [])

    // What Tether cannot honour exactly is refused, and changes nothing.
    await assert.rejects(sbx.updateNetwork({ allowOut: ['x.test'] }), /allow list/)
    await assert.rejects(sbx.updateNetwork({ allowOut: ['not a host!'], denyOut: [ALL_TRAFFIC] }), /not a host!/)
    assert.deepEqual((await v1('GET', `/v1/sandboxes/${sbx.sandboxId}/network`)).body.allow, [])
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.create({ network: { allowOut: ['x.test'] } }), /allow list/)
  await assert.rejects(Sandbox.create({ network: { denyOut: ['1.1.1.1'] } }), /denyOut/)
  await assert.rejects(SandboxApiUpdate('sbx_unknown0000000000000000000'), SandboxNotFoundError)
})

// SandboxApiUpdate updates an unknown sandbox's network through the SDK's
// static call.
function SandboxApiUpdate(id) {
  return Sandbox.updateNetwork(id, { allowOut: ['pypi.org'], denyOut: [ALL_TRAFFIC] })
}
