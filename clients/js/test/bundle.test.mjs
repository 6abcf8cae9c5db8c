// The gateway serves a bundled copy of the client (/herald-client.js): it must be what the
// sources give today.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { bundle, target } from "../scripts/bundle.mjs";

test("the copy the gateway serves is bundled from the current sources", async () => {
  const committed = await readFile(target, "utf8");
  assert.ok(committed === (await bundle()), "stale: run `npm run bundle` in clients/js and commit crates/gateway/src/herald-client.js");
});
