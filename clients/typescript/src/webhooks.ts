import { createHmac, timingSafeEqual } from "node:crypto";

/** The header a delivery's signature comes in: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`. */
export const SIGNATURE_HEADER = "Tether-Signature";

/** The header of a delivery's id: its idempotency key, the same on every attempt. */
export const DELIVERY_HEADER = "Tether-Delivery";

export interface VerifyOptions {
  /** How far the signature's time may be from now, in seconds (default 300; 0 skips the check). */
  toleranceSeconds?: number;
  /** The time to check against, in Unix seconds (default: the clock). */
  now?: number;
}

/**
 * Whether `header` (a delivery's Tether-Signature) signs `body` (the raw
 * request body, before any JSON parsing) with the endpoint's `secret`, at a
 * time within the tolerance of now. One matching v1 among several is
 * enough. A malformed header is false, never an exception.
 */
export function verifySignature(body: string | Uint8Array, header: string | null | undefined, secret: string, opts: VerifyOptions = {}): boolean {
  if (!header || !secret) return false;
  let t: string | undefined;
  const sigs: string[] = [];
  for (const part of header.split(",")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === "t") t = v;
    else if (k === "v1") sigs.push(v);
  }
  if (t === undefined || !/^\d+$/.test(t) || sigs.length === 0) return false;
  const tolerance = opts.toleranceSeconds ?? 300;
  const now = opts.now ?? Date.now() / 1000;
  if (tolerance > 0 && Math.abs(now - Number(t)) > tolerance) return false;
  const raw = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const want = Buffer.from(createHmac("sha256", secret).update(`${t}.`).update(raw).digest("hex"));
  return sigs.some((s) => {
    const got = Buffer.from(s);
    return got.length === want.length && timingSafeEqual(got, want);
  });
}
