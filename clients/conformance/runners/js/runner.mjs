// The conformance runner of herald-client (clients/js), per clients/conformance/RUNNER.md:
// JSON commands on stdin, JSON events on stdout, one per line. It drives the built client
// (clients/js/dist: `npm ci --prefix clients/js && npm run build --prefix clients/js`) and
// holds no scenario logic. Node 20 needs --experimental-websocket for the WebSocket
// transport (runners.json passes it); Node 22 has WebSocket built in.
//
// Not in herald-client today, so answered as errors: `history` (no history call), start
// `cursors` (no way to seed a cursor), `format: "msgpack"`, `heartbeat_ms` (no dead-connection
// timeout of its own: openTimeout bounds opening only).

import { createInterface } from "node:readline";
import { Herald } from "../../../js/dist/herald.js";

const TRANSPORT = { ws: "websocket", sse: "sse", poll: "poll" };
const BACK = { websocket: "ws", sse: "sse", poll: "poll" };

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

let herald;
let token = null;

function start(c) {
  token = c.token ?? null;
  const backoff = c.backoff_ms ?? [100, 2000];
  if (c.format && c.format !== "json") out({ event: "error", code: "unsupported", reason: `format ${c.format}` });
  if (c.cursors && Object.keys(c.cursors).length > 0) {
    out({ event: "error", code: "unsupported", reason: "herald-client cannot start from given cursors" });
  }
  herald = new Herald(c.urls, {
    transports: (c.transports ?? ["ws", "sse", "poll"]).map((t) => TRANSPORT[t]),
    token: token !== null ? () => token : undefined,
    backoff: { base: backoff[0], max: backoff[1] },
    openTimeout: c.open_timeout_ms ?? 3000,
    stableAfter: c.stable_ms ?? 1000,
    upgradeInterval: c.upgrade_ms ?? 2000,
    pollTimeout: Math.max(1, Math.round((c.poll_timeout_ms ?? 5000) / 1000)),
    tokenRefreshMargin: c.token_margin_ms ?? 2000,
  });
  // `state` fires before `transport` is updated (a fallback opens with the old name still
  // set): report once both are known, and only what changed.
  let last = "";
  const report = () =>
    queueMicrotask(() => {
      const s = herald.state;
      const mapped = { open: "connected", reconnecting: "disconnected", connecting: "connecting", closed: "closed" }[s];
      const transport = s === "open" ? BACK[herald.transport] ?? null : null;
      const key = `${mapped}/${transport}`;
      if (key === last) return;
      last = key;
      out({ event: "state", state: mapped, transport });
    });
  herald.on("state", report);
  // A transport that takes over while open (a probe back up) is a new "connected".
  herald.on("transport", report);
  herald.on("error", (e) => out({ event: "error", code: e.code ?? null, reason: String(e.message ?? e) }));
  herald.on("lost", (l) => out({ event: "lost", topic: l.topic, reason: l.reason }));
  const message = (m) => out({ event: "message", topic: m.topic, id: m.id, name: m.event ?? null, data: m.data });
  herald.on("serverMessage", message);
  for (const t of [...(c.topics ?? []), ...(c.patterns ?? [])]) {
    herald.subscribe(t, message, { onLost: (l) => out({ event: "lost", topic: l.topic, reason: l.reason }) });
  }
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
      const cursors = {};
      for (const t of c.topics ?? herald._conformanceTopics ?? []) {
        const v = herald.cursor(t);
        if (v !== undefined) cursors[t] = v;
      }
      out({ event: "cursors", ref, cursors });
    } else if (c.cmd === "history") {
      out({ event: "error", ref, code: "unsupported", reason: "herald-client has no history call" });
    } else {
      throw new Error(`unknown command ${c.cmd}`);
    }
  } catch (e) {
    out({ event: "error", ref, code: e.code ?? null, reason: String(e.message ?? e) });
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
let topics = [];
rl.on("line", (line) => {
  let c;
  try {
    c = JSON.parse(line);
  } catch {
    out({ event: "error", code: "bad_command", reason: `not JSON: ${line.slice(0, 80)}` });
    return;
  }
  if (c.cmd === "start") {
    topics = [...(c.topics ?? [])];
    start(c);
    herald._conformanceTopics = topics;
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
    void command(c);
  }
});
rl.on("close", () => herald?.close());
