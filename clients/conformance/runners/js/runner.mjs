// The conformance runner of heraldpush (clients/js), per clients/conformance/RUNNER.md:
// JSON commands on stdin, JSON events on stdout, one per line. It drives the built client
// (clients/js/dist: `npm ci --prefix clients/js && npm run build --prefix clients/js`) and
// holds no scenario logic.
//
// The WebSocket is given to the client as its `WebSocket` option, as a Node application gives
// it: the `ws` package (a dev dependency of clients/js, installed by `npm ci` there), which
// can drop a connection given up as dead at once (undici's, Node's own, waits for a closing
// handshake that a silent peer never answers, and keeps the process alive); Node's own where
// `ws` is not installed (Node >= 22, or Node 20 with --experimental-websocket). The client
// tells `ws` not to offer permessage-deflate (its default), so the gateway sends it batch
// frames (`?batch=1`, the client's default); Node's own always offers deflate (no batches).

import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import { Herald } from "../../../js/dist/herald.js";

const TRANSPORT = { ws: "websocket", sse: "sse", poll: "poll" };
const BACK = { websocket: "ws", sse: "sse", poll: "poll" };
const STATE = { open: "connected", reconnecting: "disconnected", connecting: "connecting", closed: "closed" };

function out(obj) {
  process.stdout.write(JSON.stringify(obj, json) + "\n");
}

/** A MessagePack payload in its JSON form (docs/protocol.md): `bin` as base64, a 64-bit
 *  integer as a number. */
function json(_key, v) {
  if (v instanceof Uint8Array) return Buffer.from(v).toString("base64");
  if (typeof v === "bigint") return Number(v);
  return v;
}

function webSocketImpl() {
  try {
    return createRequire(new URL("../../../js/package.json", import.meta.url))("ws").WebSocket;
  } catch {
    if (globalThis.WebSocket) return globalThis.WebSocket;
    process.stderr.write("[js-runner] no WebSocket: `npm ci --prefix clients/js` (ws), or Node with one\n");
    return undefined;
  }
}

let herald;
let token = null;

async function start(c) {
  token = c.token ?? null;
  const backoff = c.backoff_ms ?? [100, 2000];
  const options = {
    transports: (c.transports ?? ["ws", "sse", "poll"]).map((t) => TRANSPORT[t]),
    format: c.format ?? "json",
    token: token !== null ? () => token : undefined,
    cursors: c.cursors ?? {},
    backoff: { base: backoff[0], max: backoff[1] },
    openTimeout: c.open_timeout_ms ?? 3000,
    stableAfter: c.stable_ms ?? 1000,
    upgradeInterval: c.upgrade_ms ?? 2000,
    pollTimeout: Math.max(1, Math.round((c.poll_timeout_ms ?? 5000) / 1000)),
    tokenRefreshMargin: c.token_margin_ms ?? 2000,
    WebSocket: webSocketImpl(),
  };
  // Batch frames (`?batch=1`) are the client's default; `"batch": false` turns them off.
  if (c.batch === false) options.batch = false;
  if (c.heartbeat_ms !== null && c.heartbeat_ms !== undefined) options.deadTimeout = c.heartbeat_ms;
  herald = new Herald(c.urls, options);
  // `state` listeners read the transport that opened; a transport that takes over while open
  // (a probe back up) is a new "connected" with no other state between.
  let last = "";
  const report = () => {
    const state = STATE[herald.state];
    const transport = herald.state === "open" ? BACK[herald.transport] ?? null : null;
    const key = `${state}/${transport}`;
    if (key === last) return;
    last = key;
    out({ event: "state", state, transport });
  };
  herald.on("state", report);
  herald.on("transport", report);
  herald.on("error", (e) => out({ event: "error", code: e.code ?? null, reason: String(e.message ?? e) }));
  const lost = (l) => out({ event: "lost", topic: l.topic, reason: l.reason });
  herald.on("lost", lost);
  const message = (m) => out({ event: "message", topic: m.topic, id: m.id, name: m.event ?? null, data: m.data });
  herald.on("serverMessage", message);
  const subOptions = { onLost: lost };
  if (c.delta) subOptions.delta = c.delta;
  for (const t of [...(c.topics ?? []), ...(c.patterns ?? [])]) herald.subscribe(t, message, subOptions);
}

async function command(c) {
  const ref = c.ref;
  try {
    if (c.cmd === "token") {
      token = c.token;
    } else if (!herald) {
      throw new Error(`${c.cmd} before start`);
    } else if (c.cmd === "publish") {
      const p = await herald.publish(c.topic, c.data);
      out({ event: "published", ref, id: p.id });
    } else if (c.cmd === "cursors") {
      out({ event: "cursors", ref, cursors: herald.cursors() });
    } else if (c.cmd === "stats") {
      const s = herald.stats();
      out({ event: "stats", ref, deltas: s.deltas, delta_failures: s.deltaFailures, batches: s.batches });
    } else if (c.cmd === "history") {
      const page = await herald.history(c.topic, { limit: c.limit });
      out({ event: "history", ref, messages: page.messages.map((m) => ({ id: m.id, data: m.data })) });
    } else {
      throw new Error(`unknown command ${c.cmd}`);
    }
  } catch (e) {
    out({ event: "error", ref, code: e.code ?? null, reason: String(e.message ?? e) });
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
// Commands run in order: `start` awaits the WebSocket implementation before the next.
let queue = Promise.resolve();
rl.on("line", (line) => {
  let c;
  try {
    c = JSON.parse(line);
  } catch {
    out({ event: "error", code: "bad_command", reason: `not JSON: ${line.slice(0, 80)}` });
    return;
  }
  queue = queue.then(async () => {
    if (c.cmd === "start") {
      try {
        await start(c);
      } catch (e) {
        out({ event: "error", code: e.code ?? null, reason: `start: ${e.message ?? e}` });
      }
    } else if (c.cmd === "stop") {
      herald?.close();
      out({ event: "closed" });
      rl.close();
      process.stdin.destroy();
      // Nothing may keep the process alive after close(): exiting here would hide a leak, so
      // wait for the event loop to drain, with a bound.
      setTimeout(() => {
        const std = [process.stdin, process.stdout, process.stderr];
        const handles = process._getActiveHandles().filter((h) => !std.includes(h)).map((h) => h.constructor?.name);
        process.stderr.write(`[js-runner] still alive 5 s after close(): something leaked: ${handles.join(", ")}\n`);
        process.exit(3);
      }, 5000).unref();
    } else {
      // Not awaited: a publish waits for its answer while later commands go on.
      void command(c);
    }
  });
});
rl.on("close", () => queue.then(() => herald?.close()));
