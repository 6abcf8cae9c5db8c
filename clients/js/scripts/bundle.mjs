// Bundles the client into one ES module, the copy the gateway serves at /herald-client.js
// (crates/gateway/src/herald-client.js, committed so that `cargo build` needs no npm).
//   node scripts/bundle.mjs          writes it
//   node scripts/bundle.mjs --check  fails when the committed copy is not what the sources give
import { build } from "esbuild";
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
export const target = here("../../../crates/gateway/src/herald-client.js");

export async function bundle() {
  const result = await build({
    entryPoints: [here("../src/herald.ts")],
    bundle: true,
    format: "esm",
    target: "es2022",
    write: false,
    legalComments: "none",
    banner: {
      js: "// heraldpush (the npm package of clients/js), bundled from its src/ by `npm run bundle` there. Do not edit:\n// edit the sources and run it again (`npm test` checks this copy is current).",
    },
  });
  return result.outputFiles[0].text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = await bundle();
  if (process.argv.includes("--check")) {
    const committed = await readFile(target, "utf8").catch(() => "");
    if (committed !== text) {
      console.error(`${target} is stale: run \`npm run bundle\` in clients/js and commit it`);
      process.exit(1);
    }
  } else {
    await writeFile(target, text);
    console.log(`wrote ${target} (${text.length} bytes)`);
  }
}
