// WebSocket permessage-deflate against plain: server RSS per connection and server CPU per
// delivered message, with Node's `ws` client (from crates/gateway/tests/browser; `npm ci` there).
//
//   node deploy/bench-ws-deflate.mjs <ws://public> <http://admin> <server pid> <conns> <deflate|plain> \
//        [messages=200] [records=40]
//
// Opens <conns> WebSockets (offering permessage-deflate or not), subscribes each to one topic,
// reads the server's RSS, publishes <messages> JSON messages of <records> records each (about
// 50 bytes a record) through the admin API and waits until every client has every message,
// reading the server's CPU time (/proc/<pid>/stat) around it. Prints one JSON object.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../crates/gateway/tests/browser/package.json"));
const WebSocket = require("ws");

const [url, admin, pid, connsArg, mode, messagesArg = "200", recordsArg = "40"] = process.argv.slice(2);
const conns = Number(connsArg);
const messages = Number(messagesArg);
const records = Number(recordsArg);
const deflate = mode === "deflate";

const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]);
const cpuSeconds = () => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in clock ticks
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let received = 0;
function open() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}/v1/ws`, { perMessageDeflate: deflate });
    ws.on("message", (data) => {
      const frame = JSON.parse(data);
      if (frame.type === "subscribed") resolve(ws);
      else if (frame.type === "message") received += 1;
    });
    ws.once("open", () => ws.send(JSON.stringify({ type: "subscribe", topics: ["bench"] })));
    ws.once("error", reject);
  });
}

const rssStart = rssKiB();
const sockets = [];
for (let i = 0; i < conns; i += 100) {
  sockets.push(...(await Promise.all(Array.from({ length: Math.min(100, conns - i) }, open))));
}
if (deflate && sockets.some((ws) => ws.extensions !== "permessage-deflate")) {
  throw new Error("a connection did not negotiate permessage-deflate");
}
await sleep(3000);
const rssIdle = rssKiB();

const payload = Array.from({ length: records }, (_, i) => ({ id: i, name: "sensor", state: "ok", value: i * 7 }));
const bytesBefore = sockets.reduce((n, ws) => n + ws._socket.bytesRead, 0);
const cpuBefore = cpuSeconds();
const started = Date.now();
for (let m = 0; m < messages; m++) {
  const res = await fetch(`${admin}/v1/publish`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ topic: "bench", data: payload }),
  });
  if (res.status !== 200) throw new Error(`publish: ${res.status}`);
  await sleep(20);
}
while (received < conns * messages && Date.now() - started < 120_000) await sleep(50);
const cpu = cpuSeconds() - cpuBefore;
const bytes = sockets.reduce((n, ws) => n + ws._socket.bytesRead, 0) - bytesBefore;
await sleep(1000);
const rssAfter = rssKiB();
console.log(
  JSON.stringify({
    mode,
    conns,
    messages,
    message_bytes: JSON.stringify(payload).length,
    delivered: received,
    expected: conns * messages,
    rss_start_kib: rssStart,
    rss_idle_kib: rssIdle,
    rss_after_traffic_kib: rssAfter,
    rss_per_conn_bytes: Math.round(((rssIdle - rssStart) * 1024) / conns),
    server_cpu_s: Number(cpu.toFixed(2)),
    cpu_us_per_delivery: Number(((cpu * 1e6) / received).toFixed(2)),
    wire_bytes_per_delivery: Math.round(bytes / received),
  }),
);
for (const ws of sockets) ws.terminate();
