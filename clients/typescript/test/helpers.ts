import { TetherClient, type Sandbox } from "../src/index.js";

/** The live Tether the tests run against (TETHER_URL, TETHER_API_KEY). */
export function liveClient(): TetherClient {
  const baseUrl = process.env["TETHER_URL"];
  const apiKey = process.env["TETHER_API_KEY"];
  if (!baseUrl || !apiKey) {
    throw new Error("the tests need a live Tether: set TETHER_URL and TETHER_API_KEY (go test -run TestTypeScript ./test/e2e does)");
  }
  return new TetherClient({ baseUrl, apiKey });
}

/** The server's janitor interval in seconds (TETHER_JANITOR_INTERVAL, default 1). */
export const janitorSeconds = Number(process.env["TETHER_JANITOR_INTERVAL"] ?? "1");

/** Polls get until cond holds, or fails after timeoutMs. */
export async function pollUntil(get: () => Promise<Sandbox>, cond: (sb: Sandbox) => boolean, timeoutMs = 30_000): Promise<Sandbox> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const sb = await get();
    if (cond(sb)) return sb;
    if (Date.now() > deadline) throw new Error(`condition never held: ${JSON.stringify(sb)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export const text = (b: Uint8Array): string => new TextDecoder().decode(b);
export const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
