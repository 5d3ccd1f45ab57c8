// An E2B program that holds an owner-bound sandbox until it is killed: it
// creates a sandbox bound to the owner HOLDER_OWNER through the SDK
// (metadata tether.owner; the create starts the owner's lease), then
// heartbeats that lease (HOLDER_TTL_SECONDS long) with Tether's API,
// prints the sandbox's id and waits. The test SIGKILLs it and watches the
// sandbox end with its owner's lease.
import { Sandbox } from 'e2b'

const owner = process.env.HOLDER_OWNER
const ttl = Number(process.env.HOLDER_TTL_SECONDS)
if (!owner || !(ttl > 0)) throw new Error('HOLDER_OWNER and HOLDER_TTL_SECONDS are required')

async function heartbeat() {
  const res = await fetch(`${process.env.TETHER_URL}/v1/owners/${owner}/lease`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${process.env.TETHER_API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ ttl_seconds: ttl }),
  })
  if (res.status !== 200) throw new Error(`heartbeat: ${res.status} ${await res.text()}`)
}

const sbx = await Sandbox.create({ metadata: { 'tether.owner': owner, run: owner } })
await heartbeat()
setInterval(() => heartbeat().catch((e) => console.error(e.message)), (ttl * 1000) / 6)
console.log(sbx.sandboxId)
