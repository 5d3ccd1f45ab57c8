import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const pkg = fileURLToPath(new URL("../../", import.meta.url)); // clients/typescript (tests run from build/test)

test("src/schema.ts is what openapi-typescript makes of docs/openapi.json (else: npm run generate)", () => {
  const cli = fileURLToPath(new URL("node_modules/openapi-typescript/bin/cli.js", `file://${pkg}`));
  const fresh = execFileSync(process.execPath, [cli, "../../docs/openapi.json"], { cwd: pkg, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const committed = readFileSync(`${pkg}src/schema.ts`, "utf8");
  assert.ok(fresh.includes("export interface paths"), "openapi-typescript printed the types");
  assert.equal(committed, fresh, "src/schema.ts is stale: run `npm run generate` in clients/typescript");
});
