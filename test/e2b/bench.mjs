// Time to interactive through the E2B SDK beside the same through Tether's
// own API, in one run: Sandbox.create() then commands.run('echo ok'),
// against POST /v1/sandboxes, GET /v1/sandboxes/{id}?wait= (ready) and
// POST /v1/sandboxes/{id}/exec of the same command, both from this Node
// process, as ComputeSDK's method: BENCH_MODE sequential (the default),
// staggered or burst (below); each sandbox is ended, untimed, after its
// command. It prints the median, p95 and p99 of each face and their
// ratios.
//
//   E2B_API_URL=$T/e2b E2B_SANDBOX_URL=$T/e2b/envd E2B_API_KEY=$K \
//   TETHER_URL=$T TETHER_API_KEY=$K BENCH_N=100 node bench.mjs
import { Sandbox } from 'e2b'

const tether = process.env.TETHER_URL
const key = process.env.TETHER_API_KEY
const n = Number(process.env.BENCH_N ?? 50)
const warmup = Number(process.env.BENCH_WARMUP ?? 3)
// BENCH_POOL names a warm pool of local sandboxes the run makes (and
// deletes) and both faces claim from: the E2B template of that name, /v1's
// pool. Without it, every sandbox is a cold create of the default root.
const pool = process.env.BENCH_POOL

async function v1(method, path, body) {
  const res = await fetch(tether + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : undefined
}

async function viaE2B() {
  const t0 = performance.now()
  const sbx = await (pool ? Sandbox.create(pool) : Sandbox.create())
  const r = await sbx.commands.run('echo ok')
  const took = performance.now() - t0
  if (r.stdout !== 'ok\n') throw new Error(`e2b: ${JSON.stringify(r)}`)
  await sbx.kill()
  return took
}

async function viaV1() {
  const t0 = performance.now()
  const made = await v1('POST', '/v1/sandboxes', pool ? { pool } : {})
  const sb = await v1('GET', `/v1/sandboxes/${made.id}?wait=60s`)
  if (sb.state !== 'ready') throw new Error(`v1: ${JSON.stringify(sb)}`)
  const r = await v1('POST', `/v1/sandboxes/${sb.id}/exec`, { command: 'echo ok' })
  const took = performance.now() - t0
  if (r.output !== 'ok\n') throw new Error(`v1: ${JSON.stringify(r)}`)
  await v1('DELETE', `/v1/sandboxes/${sb.id}`)
  return took
}

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]
}

const mode = process.env.BENCH_MODE ?? 'sequential'
const stagger = Number(process.env.BENCH_STAGGER_MS ?? 200)
const e2b = []
const native = []

// sequential: one sandbox at a time, the faces alternating.
async function sequential() {
  for (let i = 0; i < n; i++) {
    const pair = i % 2 === 0 ? [[viaE2B, e2b], [viaV1, native]] : [[viaV1, native], [viaE2B, e2b]]
    for (const [f, xs] of pair) xs.push(await f())
  }
}

// staggered: a start every BENCH_STAGGER_MS, the faces alternating, each
// running to its end whatever the others do.
async function staggered() {
  const runs = []
  for (let i = 0; i < 2 * n; i++) {
    const [f, xs] = i % 2 === 0 ? [viaE2B, e2b] : [viaV1, native]
    runs.push(f().then((t) => xs.push(t)))
    await new Promise((r) => setTimeout(r, stagger))
  }
  await Promise.all(runs)
}

// burst: n at once through one face, then n at once through the other,
// then again in the other order (half of n each time).
async function burst() {
  const half = Math.max(1, Math.floor(n / 2))
  const all = (f, xs) => Promise.all(Array.from({ length: half }, () => f().then((t) => xs.push(t))))
  await all(viaE2B, e2b)
  await all(viaV1, native)
  await all(viaV1, native)
  await all(viaE2B, e2b)
}

if (pool) {
  const size = Number(process.env.BENCH_POOL_SIZE ?? 10)
  await v1('POST', '/v1/pools', { name: pool, provider: 'local', min_ready: size, max_size: 2 * size })
  const deadline = Date.now() + 120_000
  while ((await v1('GET', `/v1/pools/${pool}`)).ready < size) {
    if (Date.now() > deadline) throw new Error(`pool ${pool} did not fill`)
    await new Promise((r) => setTimeout(r, 200))
  }
}
for (let i = 0; i < warmup; i++) {
  await viaE2B()
  await viaV1()
}
try {
  await { sequential, staggered, burst }[mode]()
} finally {
  if (pool) await v1('DELETE', `/v1/pools/${pool}`)
}
const row = (name, xs) => `| ${name} | ${[50, 95, 99].map((p) => pct(xs, p).toFixed(1)).join(' | ')} |`
console.log(`${mode}${pool ? ', from a pool' : ', cold'}, n=${e2b.length} each (ms)`)
console.log('| face | median | p95 | p99 |')
console.log('| --- | --- | --- | --- |')
console.log(row('E2B SDK 2.51.0', e2b))
console.log(row('Tether /v1 (fetch)', native))
console.log(`| ratio | ${[50, 95, 99].map((p) => (pct(e2b, p) / pct(native, p)).toFixed(2)).join(' | ')} |`)
