// Delta compression (issue 42): bytes on the wire per delivery, full JSON against Fossil
// deltas, for three workloads on every transport, with every delta checked.
//
//   node deploy/bench-delta.mjs [herald binary=target/release/herald] [ticker publications=1000]
//
// Needs `ws` and `fossil-delta` from clients/js/node_modules (`npm ci` in clients/js).
// Starts one herald on free loopback ports with a config whose namespace `d` has
// delta = "fossil", then per workload (football: 22 players, 30 full-state publications,
// seeded; ticker: 100 symbols, a few changing per publication; random: ~300 random letters)
// opens one client per transport and mode on the same topic and publishes through the admin
// API one message at a time, waiting until every streaming client has it (so nothing is
// coalesced or dropped). Bytes are the client sockets' raw bytesRead (HTTP chunking, WebSocket
// framing and compression included) from just before the first publication to just after
// the last delivery: handshakes, subscribe answers and the opening of a poll are excluded.
// SSE heartbeats are asked every 300 s and WebSocket pings every 300 s so none fall inside.
// Long-poll: `poll-each` polls once per publication (its answer's only message is full by
// design); `poll-batch` polls after all publications, from the cursor taken before them,
// until an answer is empty (the first message of each answer full, the rest deltas); its
// bytes are the whole answers (head and body), the request excluded. Every delta is applied
// (the npm fossil-delta decoder, checksum checked) and every rebuilt data compared with what
// was published; the script fails on a mismatch. Prints one table per workload and a JSON
// summary line. Traffic stays on loopback; every wait is bounded.

import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import net from "node:net";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.join(here, "../clients/js/node_modules");
const require = createRequire(path.join(modules, "placeholder.js"));
const WebSocket = require("ws");
const { applyDelta } = await import(path.join(modules, "fossil-delta/fossil-delta.js"));

const [bin = path.join(here, "../target/release/herald"), tickerArg = "1000"] = process.argv.slice(2);
const TICKER_PUBS = Number(tickerArg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

// ---- seeded workloads -------------------------------------------------------------------
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIRST = ["Luca", "Marco", "João", "Kevin", "Erling", "Kylian", "Harry", "Jude", "Pedri", "Bruno", "Virgil", "Toni", "Rúben", "Phil", "Bukayo", "Declan", "Martin", "Rodri", "Jamal", "Florian", "Son", "Mo"];
const LAST = ["Rossi", "Silva", "Müller", "García", "Smith", "Haaland", "Mbappé", "Kane", "Bellingham", "Fernandes", "van Dijk", "Kroos", "Dias", "Foden", "Saka", "Rice", "Ødegaard", "Hernández", "Musiala", "Wirtz", "Heung-min", "Salah"];
const POS = ["GK", "RB", "CB", "CB", "LB", "DM", "CM", "CM", "RW", "ST", "LW"];

// `minutes`: every player on the pitch carries his minutes played, so every publication
// changes 22 places (the harder case for a delta); without it only the match minute, the
// score sheet and the event change.
function football(seed = 42, minutes = true) {
  const r = rng(seed);
  let nextId = 1;
  const player = (team, i) => ({
    id: nextId++,
    name: `${FIRST[Math.floor(r() * FIRST.length)]} ${LAST[Math.floor(r() * LAST.length)]}`,
    number: i + 1,
    position: POS[i],
    goals: 0,
    yellow_cards: 0,
    red_card: false,
    on_pitch: true,
    minutes: 0,
  });
  const team = (name) => ({ name, score: 0, players: Array.from({ length: 11 }, (_, i) => player(name, i)), substitutions: 0 });
  const state = { match: "Home FC v Away United", minute: 0, status: "live", home: team("Home FC"), away: team("Away United"), last_event: null };
  const out = [];
  for (let m = 0; m < 30; m++) {
    state.minute = Math.min(90, state.minute + 1 + Math.floor(r() * 5));
    if (minutes) for (const t of [state.home, state.away]) for (const p of t.players) if (p.on_pitch) p.minutes = state.minute;
    const t = r() < 0.5 ? state.home : state.away;
    const p = t.players[1 + Math.floor(r() * 10)];
    const roll = r();
    if (roll < 0.25) {
      p.goals += 1;
      t.score += 1;
      state.last_event = { type: "goal", team: t.name, player: p.id, minute: state.minute };
    } else if (roll < 0.5) {
      if (p.yellow_cards === 1) p.red_card = true;
      p.yellow_cards += 1;
      state.last_event = { type: "card", card: p.red_card ? "red" : "yellow", team: t.name, player: p.id, minute: state.minute };
    } else if (roll < 0.7 && t.substitutions < 5) {
      const i = t.players.indexOf(p);
      p.on_pitch = false;
      t.players[i] = { ...player(t.name, i), number: 12 + t.substitutions, minutes: 0 };
      t.substitutions += 1;
      state.last_event = { type: "substitution", team: t.name, off: p.id, on: t.players[i].id, minute: state.minute };
    } else {
      state.last_event = { type: "possession", team: t.name, minute: state.minute };
    }
    out.push(JSON.parse(JSON.stringify(state)));
  }
  return out;
}

function ticker(n, seed = 7) {
  const r = rng(seed);
  const symbols = Array.from({ length: 100 }, (_, i) => ({
    s: `SYM${String(i).padStart(3, "0")}`,
    p: Math.round((10 + r() * 990) * 100) / 100,
    c: 0,
    v: Math.floor(r() * 1e6),
  }));
  const out = [];
  for (let k = 0; k < n; k++) {
    const changes = 1 + Math.floor(r() * 5);
    for (let j = 0; j < changes; j++) {
      const x = symbols[Math.floor(r() * 100)];
      const d = Math.round((r() - 0.5) * x.p * 2) / 100;
      x.p = Math.round((x.p + d) * 100) / 100;
      x.c = Math.round(d * 100) / 100;
      x.v += Math.floor(r() * 1000);
    }
    out.push({ seq: k, symbols: symbols.map((x) => ({ ...x })) });
  }
  return out;
}

function random(n, seed = 9) {
  const r = rng(seed);
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return Array.from({ length: n }, () => Array.from({ length: 300 }, () => letters[Math.floor(r() * 52)]).join(""));
}

// ---- MessagePack: a small encoder (the subscribe command) and decoder (frames) ------------
function mpEncode(v) {
  const parts = [];
  const put = (x) => {
    if (typeof x === "string") {
      const b = enc.encode(x);
      if (b.length < 32) parts.push(Uint8Array.of(0xa0 | b.length));
      else parts.push(Uint8Array.of(0xd9, b.length));
      parts.push(b);
    } else if (typeof x === "number") {
      parts.push(Uint8Array.of(x & 0x7f));
    } else if (Array.isArray(x)) {
      parts.push(Uint8Array.of(0x90 | x.length));
      x.forEach(put);
    } else {
      const keys = Object.keys(x);
      parts.push(Uint8Array.of(0x80 | keys.length));
      for (const k of keys) {
        put(k);
        put(x[k]);
      }
    }
  };
  put(v);
  return Buffer.concat(parts);
}

function mpDecode(buf, at = 0, spans = null) {
  const b = buf;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let i = at;
  const str = (n) => {
    const s = dec.decode(b.subarray(i, i + n));
    i += n;
    return s;
  };
  const bin = (n) => {
    const s = b.subarray(i, i + n);
    i += n;
    return s;
  };
  const arr = (n) => Array.from({ length: n }, () => val());
  const map = (n, top) => {
    const o = {};
    for (let k = 0; k < n; k++) {
      const key = val();
      const start = i;
      o[key] = val();
      if (top && spans) spans[key] = [start, i];
    }
    return o;
  };
  const val = (top = false) => {
    const t = b[i++];
    if (t <= 0x7f) return t;
    if (t >= 0xe0) return t - 256;
    if ((t & 0xf0) === 0x80) return map(t & 0x0f, top);
    if ((t & 0xf0) === 0x90) return arr(t & 0x0f);
    if ((t & 0xe0) === 0xa0) return str(t & 0x1f);
    const u = (n) => {
      let x = 0;
      for (let k = 0; k < n; k++) x = x * 256 + b[i++];
      return x;
    };
    switch (t) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(u(1));
      case 0xc5: return bin(u(2));
      case 0xc6: return bin(u(4));
      case 0xca: { const x = dv.getFloat32(i); i += 4; return x; }
      case 0xcb: { const x = dv.getFloat64(i); i += 8; return x; }
      case 0xcc: return u(1);
      case 0xcd: return u(2);
      case 0xce: return u(4);
      case 0xcf: return u(8);
      case 0xd0: { const x = dv.getInt8(i); i += 1; return x; }
      case 0xd1: { const x = dv.getInt16(i); i += 2; return x; }
      case 0xd2: { const x = dv.getInt32(i); i += 4; return x; }
      case 0xd3: { const x = Number(dv.getBigInt64(i)); i += 8; return x; }
      case 0xd9: return str(u(1));
      case 0xda: return str(u(2));
      case 0xdb: return str(u(4));
      case 0xdc: return arr(u(2));
      case 0xdd: return arr(u(4));
      case 0xde: return map(u(2), top);
      case 0xdf: return map(u(4), top);
      default: throw new Error(`msgpack type 0x${t.toString(16)} not handled`);
    }
  };
  return val(true);
}

// The same JSON value; SSE's default form sends a string payload as its raw text.
function sameJson(text, json) {
  try {
    return JSON.stringify(JSON.parse(text)) === json;
  } catch {
    return JSON.stringify(text) === json;
  }
}

// ---- clients ------------------------------------------------------------------------------
// Every client keeps: got (messages), deltas, the published index it expects next, its base.
class Tracker {
  constructor(name, published) {
    Object.assign(this, { name, published, got: 0, deltas: 0, base: null, mismatches: 0 });
    // JSON frames that were deltas: their text, their `data` as sent (escaped), the raw delta
    Object.assign(this, { deltaFrameText: 0, deltaDataText: 0, deltaRaw: 0 });
  }
  // data: the rebuilt or full data (string for JSON forms, bytes for MessagePack)
  check(rebuilt, isDelta) {
    const want = this.published[this.got];
    let same;
    if (typeof rebuilt === "string") same = rebuilt === want.json || sameJson(rebuilt, want.json);
    else same = JSON.stringify(mpDecode(rebuilt)) === want.json;
    if (!same) {
      this.mismatches += 1;
      console.error(`${this.name}: message ${this.got}${isDelta ? " (delta)" : ""} does not rebuild the published data`);
    }
    this.got += 1;
    if (isDelta) this.deltas += 1;
  }
  // A JSON message frame's text.
  jsonFrame(text) {
    const frame = JSON.parse(text);
    if (frame.type !== undefined && frame.type !== "message") return;
    const at = text.indexOf('"data":');
    const data = text.slice(at + 7, text.lastIndexOf("}"));
    if (frame.delta === true) {
      if (this.base === null) throw new Error(`${this.name}: a delta without a base`);
      this.deltaFrameText += Buffer.byteLength(text);
      this.deltaDataText += Buffer.byteLength(data);
      this.deltaRaw += Buffer.byteLength(frame.data);
      const out = applyDelta(enc.encode(this.base), enc.encode(frame.data));
      this.base = dec.decode(Uint8Array.from(out));
    } else {
      this.base = data;
    }
    this.check(this.base, frame.delta === true);
  }
  msgpackFrame(buf) {
    const spans = {};
    const frame = mpDecode(buf, 0, spans);
    if (frame.type !== "message") return;
    if (frame.delta === true) {
      if (this.base === null) throw new Error(`${this.name}: a delta without a base`);
      this.deltaFrameText += buf.length;
      this.deltaRaw += frame.data.length;
      this.base = Uint8Array.from(applyDelta(this.base, frame.data));
    } else {
      this.base = Uint8Array.from(buf.subarray(spans.data[0], spans.data[1]));
    }
    this.check(this.base, frame.delta === true);
  }
}

function wsClient(base, topic, published, { delta, deflate = false, msgpack = false }) {
  const name = `ws${msgpack ? "-msgpack" : "-json"}${deflate ? "-deflate" : ""}${delta ? "+delta" : ""}`;
  const t = new Tracker(name, published);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}/v1/ws`, msgpack ? ["herald.msgpack"] : [], { perMessageDeflate: deflate });
    const send = (o) => ws.send(msgpack ? mpEncode(o) : JSON.stringify(o));
    const timer = setTimeout(() => reject(new Error(`${name}: no subscribed`)), 10_000);
    ws.on("message", (data, isBinary) => {
      if (msgpack && !isBinary) return reject(new Error(`${name}: text frame`));
      const kind = msgpack ? mpDecode(data).type : JSON.parse(data).type;
      if (kind === "subscribed") {
        clearTimeout(timer);
        t.bytes = () => ws._socket.bytesRead;
        t.close = () => ws.terminate();
        resolve(t);
      } else if (kind === "error") reject(new Error(`${name}: ${msgpack ? JSON.stringify(mpDecode(data)) : data}`));
      else if (kind === "message") (msgpack ? t.msgpackFrame(data) : t.jsonFrame(data.toString()));
    });
    ws.once("open", () => {
      if (deflate && ws.extensions !== "permessage-deflate") reject(new Error(`${name}: no permessage-deflate`));
      send({ type: "heartbeat", interval: 300 });
      send(delta ? { type: "subscribe", topics: [topic], delta: "fossil" } : { type: "subscribe", topics: [topic] });
    });
    ws.once("error", reject);
  });
}

function sseClient(base, topic, published, { delta, format = "json" }) {
  const name = `sse${format === "json" ? "-json" : "-data"}${delta ? "+delta" : ""}`;
  const t = new Tracker(name, published);
  let q = `topic=${encodeURIComponent(topic)}&heartbeat=300`;
  if (format === "json") q += "&format=json";
  if (delta) q += "&delta=fossil";
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}/v1/sse?${q}`, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`${name}: ${res.statusCode}`));
      res.setEncoding("utf8");
      let pending = "";
      res.on("data", (chunk) => {
        pending += chunk;
        let end;
        while ((end = pending.indexOf("\n\n")) >= 0) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const lines = block.split("\n");
          if (lines.some((l) => l.startsWith("event:"))) continue; // herald.* blocks
          const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(l.startsWith("data: ") ? 6 : 5)).join("\n");
          if (!data) continue;
          if (format === "json") t.jsonFrame(data);
          else t.check(data, false);
        }
      });
      t.bytes = () => req.socket.bytesRead;
      t.close = () => req.destroy();
      // the stream is open once the head is read; give the subscription a moment
      setTimeout(() => resolve(t), 200);
    });
    req.on("error", reject);
  });
}

// Long-poll over one keep-alive socket; bytes: every answer (head and body) of its polls.
function poller(base, topic, published, { delta }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const t = new Tracker(`poll${delta ? "+delta" : ""}`, published);
  Object.assign(t, { wire: 0, answers: 0, bodyBytes: 0 });
  t.poll = (cursor, timeout) =>
    new Promise((resolve, reject) => {
      let q = `topic=${encodeURIComponent(topic)}&timeout=${timeout}`;
      if (cursor) q += `&cursor=${encodeURIComponent(cursor)}`;
      if (delta) q += "&delta=fossil";
      let start = 0;
      const req = http.get(`${base}/v1/poll?${q}`, { agent }, (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const body = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode !== 200) return reject(new Error(`${t.name}: ${res.statusCode} ${body}`));
          resolve({ body, bytes: req.socket.bytesRead - start });
        });
      });
      req.on("socket", (s) => (start = s.bytesRead));
      req.on("error", reject);
    });
  return t;
}

// The raw text of each object in an answer's `messages` array (a poll's base is the exact
// text of the previous message's data, so the answer is not re-serialized).
function rawMessages(body) {
  const out = [];
  let i = body.indexOf('"messages":[');
  if (i < 0) return out;
  i += 12;
  let depth = 0, start = -1, inStr = false;
  for (; i < body.length; i++) {
    const c = body[i];
    if (inStr) {
      if (c === "\\") i++;
      else if (c === '"') inStr = false;
    } else if (c === '"') inStr = true;
    else if (c === "{" || c === "[") {
      if (depth++ === 0) start = i;
    } else if (c === "}" || c === "]") {
      if (depth === 0) break; // the end of `messages`
      if (--depth === 0) out.push(body.slice(start, i + 1));
    }
  }
  return out;
}

async function pollOnce(t, cursor, timeout, measure) {
  const r = await t.poll(cursor, timeout);
  const answer = JSON.parse(r.body);
  if (measure) {
    t.answers += 1;
    t.wire += r.bytes;
    t.bodyBytes += Buffer.byteLength(r.body);
    for (const m of rawMessages(r.body)) t.jsonFrame(m);
  }
  return answer.cursor;
}

// ---- the run -----------------------------------------------------------------------------
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function publish(admin, topic, data) {
  const res = await fetch(`${admin}/v1/publish`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ topic, data }),
  });
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return (await res.json()).id;
}

async function workload(name, base, admin, datas) {
  const topic = `d:${name}`;
  const published = datas.map((d) => ({ json: JSON.stringify(d) }));
  const streams = [];
  for (const delta of [false, true]) {
    streams.push(await wsClient(base, topic, published, { delta }));
    streams.push(await wsClient(base, topic, published, { delta, deflate: true }));
    streams.push(await wsClient(base, topic, published, { delta, msgpack: true }));
    streams.push(await sseClient(base, topic, published, { delta }));
  }
  streams.push(await sseClient(base, topic, published, { delta: false, format: "data" }));
  const each = [poller(base, topic, published, { delta: false }), poller(base, topic, published, { delta: true })];
  const batch = [poller(base, topic, published, { delta: false }), poller(base, topic, published, { delta: true })];
  each.forEach((p) => (p.name = `${p.name.replace("poll", "poll-each")}`));
  batch.forEach((p) => (p.name = `${p.name.replace("poll", "poll-batch")}`));
  const cursors = new Map();
  for (const p of [...each, ...batch]) cursors.set(p, await pollOnce(p, null, 0, false));
  await sleep(300);
  const before = streams.map((s) => s.bytes());
  for (let i = 0; i < datas.length; i++) {
    await publish(admin, topic, datas[i]);
    const until = Date.now() + 10_000;
    while (streams.some((s) => s.got <= i)) {
      if (Date.now() > until) throw new Error(`message ${i} not delivered: ${streams.filter((s) => s.got <= i).map((s) => s.name)}`);
      await sleep(1);
    }
    for (const p of each) {
      const c = await pollOnce(p, cursors.get(p), 5, true);
      cursors.set(p, c);
    }
  }
  const counts = (s) => ({ delta_frame_text: s.deltaFrameText, delta_data_text: s.deltaDataText, delta_raw: s.deltaRaw });
  const rows = streams.map((s, k) => ({ name: s.name, got: s.got, deltas: s.deltas, mismatches: s.mismatches, bytes: s.bytes() - before[k], ...counts(s) }));
  for (const p of batch) {
    let c = cursors.get(p);
    for (let k = 0; k < 1000 && p.got < datas.length; k++) c = await pollOnce(p, c, 0, true);
  }
  for (const p of [...each, ...batch]) rows.push({ name: p.name, got: p.got, deltas: p.deltas, mismatches: p.mismatches, bytes: p.wire, answers: p.answers, body: p.bodyBytes, ...counts(p) });
  streams.forEach((s) => s.close());
  const payload = published.reduce((n, p) => n + Buffer.byteLength(p.json), 0);
  return { name, publications: datas.length, payload_bytes: payload, rows };
}

function table(w) {
  const by = new Map(w.rows.map((r) => [r.name, r]));
  const lines = [
    `\n${w.name}: ${w.publications} publications, ${w.payload_bytes} bytes of JSON data published (${Math.round(w.payload_bytes / w.publications)} per message)`,
    "transport              full B/deliv  delta B/deliv  delta/full  vs WS JSON  deltas  checked",
  ];
  const pairs = [
    ["WebSocket JSON", "ws-json", "ws-json+delta"],
    ["WebSocket deflate", "ws-json-deflate", "ws-json-deflate+delta"],
    ["WebSocket MessagePack", "ws-msgpack", "ws-msgpack+delta"],
    ["SSE (format=json)", "sse-json", "sse-json+delta"],
    ["long-poll, one/publ.", "poll-each", "poll-each+delta"],
    ["long-poll, batched", "poll-batch", "poll-batch+delta"],
  ];
  for (const [label, a, b] of pairs) {
    const f = by.get(a), d = by.get(b);
    const ok = f.got === w.publications && d.got === w.publications && f.mismatches + d.mismatches === 0;
    lines.push(
      `${label.padEnd(22)} ${(f.bytes / f.got).toFixed(1).padStart(12)} ${(d.bytes / d.got).toFixed(1).padStart(14)} ${((100 * d.bytes) / f.bytes).toFixed(1).padStart(9)} % ${((100 * d.bytes) / by.get("ws-json").bytes).toFixed(1).padStart(9)} % ${String(d.deltas).padStart(6)}  ${ok ? "ok" : "FAILED"}`,
    );
  }
  for (const n of ["ws-json+delta", "ws-msgpack+delta", "sse-json+delta"]) {
    const r = by.get(n);
    if (!r.deltas) continue;
    const per = (x) => (x / r.deltas).toFixed(1);
    lines.push(`${n}: a delta message averages ${per(r.delta_raw)} B of raw delta, ${r.delta_data_text ? `${per(r.delta_data_text)} B as the escaped JSON string, ` : ""}${per(r.delta_frame_text)} B of frame`);
  }
  const s = by.get("sse-data");
  lines.push(`(SSE default form, data only: ${(s.bytes / s.got).toFixed(1)} B/delivery; WebSocket JSON vs MessagePack+delta: ${((100 * by.get("ws-msgpack+delta").bytes) / by.get("ws-json").bytes).toFixed(1)} %; deflate+delta vs JSON: ${((100 * by.get("ws-json-deflate+delta").bytes) / by.get("ws-json").bytes).toFixed(1)} %)`);
  return lines.join("\n");
}

const dir = mkdtempSync(path.join(tmpdir(), "herald-delta-"));
const config = path.join(dir, "herald.toml");
writeFileSync(config, '[namespaces.d]\ndelta = "fossil"\nhistory_len = 5000\nanonymous = true\n');
const [port, adminPort] = [await freePort(), await freePort()];
const server = spawn(bin, ["--config", config, "--listen", `127.0.0.1:${port}`, "--admin-listen", `127.0.0.1:${adminPort}`, "--log-filter", "warn"], { stdio: ["ignore", "inherit", "inherit"] });
const base = `http://127.0.0.1:${port}`;
const admin = `http://127.0.0.1:${adminPort}`;
let failed = false;
try {
  for (let k = 0; ; k++) {
    if (k > 100) throw new Error("herald did not start");
    try {
      if ((await fetch(`${admin}/v1/topics`)).ok) break;
    } catch {}
    await sleep(100);
  }
  const results = [];
  results.push(await workload("football", base, admin, football()));
  results.push(await workload("football-lite", base, admin, football(42, false)));
  results.push(await workload("ticker", base, admin, ticker(TICKER_PUBS)));
  results.push(await workload("random", base, admin, random(200)));
  for (const w of results) {
    console.log(table(w));
    for (const r of w.rows) if (r.got !== w.publications || r.mismatches) failed = true;
  }
  console.log(JSON.stringify({ date: new Date().toISOString(), results }));
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  server.kill("SIGTERM");
}
process.exit(failed ? 1 : 0);
