import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { TetherError, isProblem } from "../src/index.js";
import { errorFromResponse } from "../src/errors.js";

// Tests that need no server: how Problems become TetherErrors.

const openapi = fileURLToPath(new URL("../../../../docs/openapi.json", import.meta.url)); // tests run from build/test

test("every code of the OpenAPI document's Problem is a Problem's code", () => {
  const doc = JSON.parse(readFileSync(openapi, "utf8")) as { components: { schemas: { Problem: { properties: { code: { enum: string[] } } } } } };
  const enumCodes = doc.components.schemas.Problem.properties.code.enum;
  assert.ok(enumCodes.includes("PROCESS_NOT_FOUND") && enumCodes.includes("PROCESS_STATE_CONFLICT"), enumCodes.join(","));
  for (const code of enumCodes) {
    assert.ok(isProblem({ status: 400, code, detail: "x" }), `${code} is not recognised`);
  }
  assert.equal(isProblem({ status: 400, code: "NO_SUCH_CODE", detail: "x" }), false);
});

test("the process codes come back as TetherErrors with their status", () => {
  for (const [status, code] of [[404, "PROCESS_NOT_FOUND"], [409, "PROCESS_STATE_CONFLICT"], [409, "SANDBOX_ID_TAKEN"], [409, "POOL_EXISTS"], [409, "POOL_EMPTY"]] as const) {
    const res = new Response(null, { status, headers: { "X-Request-ID": "rid" } });
    const err = errorFromResponse(res, { type: "about:blank", title: "t", status, code, detail: `no ${code}` });
    assert.ok(err instanceof TetherError);
    assert.equal(err.code, code);
    assert.equal(err.status, status);
    assert.equal(err.requestId, "rid");
    assert.match(err.message, new RegExp(`^${code}: no ${code}$`));
  }
});
