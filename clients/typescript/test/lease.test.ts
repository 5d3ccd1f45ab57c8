import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { liveClient, janitorSeconds, pollUntil } from "./helpers.js";

const client = liveClient();
const holder = fileURLToPath(new URL("./fixtures/holder.js", import.meta.url));
const ttl = 2;

function start(mode: "hold" | "return"): { child: ChildProcess; info: Promise<{ id: string; owner: string }> } {
  const child = spawn(process.execPath, [holder, mode, String(ttl)], { stdio: ["ignore", "pipe", "inherit"] });
  const info = new Promise<{ id: string; owner: string }>((resolve, reject) => {
    let buf = "";
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (d: string) => {
      buf += d;
      const nl = buf.indexOf("\n");
      if (nl >= 0) resolve(JSON.parse(buf.slice(0, nl)) as { id: string; owner: string });
    });
    child.on("exit", (code) => reject(new Error(`holder exited (${code}) before reporting its sandbox`)));
  });
  return { child, info };
}

const isEnded = (s: { state: string }): boolean => !["requested", "creating", "ready"].includes(s.state);

test("a process killed with SIGKILL loses its sandbox within lease + one janitor interval", async (t) => {
  const { child, info } = start("hold");
  t.after(() => { if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL"); });
  const { id, owner } = await info;
  t.after(() => client.deleteSandbox(id));

  // While the process lives, its heartbeat keeps the sandbox well past the lease.
  await new Promise((r) => setTimeout(r, (ttl + janitorSeconds) * 1000 * 1.5));
  const alive = await client.getSandbox(id);
  assert.equal(alive.state, "ready");
  assert.equal(alive.owner, owner);

  child.kill("SIGKILL");
  await once(child, "exit");
  const killedAt = Date.now();
  const ended = await pollUntil(() => client.getSandbox(id), isEnded, 30_000);
  const elapsed = Date.now() - killedAt;
  assert.equal(ended.state, "terminated");
  assert.equal(ended.reason, "owner_expired");
  const bound = (ttl + janitorSeconds) * 1000 + 1000; // + polling and scheduling slack
  assert.ok(elapsed <= bound, `ended ${elapsed} ms after SIGKILL, bound ${bound} ms`);
  const released = await client.waitSandbox(id, { until: "released", timeoutMs: 30_000 });
  assert.equal(released.released, true);
});

test("the heartbeat's timer does not keep a process alive", async (t) => {
  const { child, info } = start("return");
  t.after(() => { if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL"); });
  const { id } = await info;
  t.after(() => client.deleteSandbox(id));
  const exited = await Promise.race([
    once(child, "exit").then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 10_000)),
  ]);
  assert.equal(exited, true, "the holder returned but its process did not exit");
  const ended = await pollUntil(() => client.getSandbox(id), isEnded, 30_000);
  assert.equal(ended.reason, "owner_expired");
});
