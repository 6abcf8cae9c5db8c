// Delta compression (docs/protocol.md "Delta compression"): the Fossil decoder against the
// `fossil-delta` package's encoder and against crafted malformed deltas; the base bytes of
// frames; and the client over a WebSocket (JSON and MessagePack), SSE and long-poll: deltas
// applied transparently, and a delta that does not apply counted, never delivered, its topic
// subscribed again from the last message delivered.
import { test } from "node:test";
import assert from "node:assert/strict";
import { WebSocket, WebSocketServer } from "ws";
import { createDelta } from "fossil-delta";
import { Herald, encodeMsgpack, decodeMsgpack, applyFossil, DeltaError } from "../dist/herald.js";
import { Bases, jsonDataText, msgpackDataBytes, pollMessageTexts, deltaMessages, fossilChecksum } from "../dist/delta.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
const delta = (a, b) => new Uint8Array(createDelta(enc.encode(a), enc.encode(b)));
const deltaText = (a, b) => dec.decode(delta(a, b));

test("applyFossil: a chain of deltas made by fossil-delta gives each target", () => {
  let base = JSON.stringify({ players: Array.from({ length: 40 }, (_, i) => ({ id: i, score: 0 })) });
  for (let n = 1; n <= 30; n++) {
    const o = JSON.parse(base);
    o.players[(n * 7) % 40].score += n;
    const next = JSON.stringify(o);
    const d = delta(base, next);
    assert.ok(d.length < next.length / 2, "a small change makes a small delta");
    assert.equal(dec.decode(applyFossil(enc.encode(base), d)), next);
    base = next;
  }
  // Binary bases (MessagePack) too, and an empty target.
  const a = new Uint8Array(300).map((_, i) => (i * 31) & 0xff);
  const b = a.slice();
  b[100] ^= 0xff;
  assert.deepEqual(applyFossil(a, new Uint8Array(createDelta(a, b))), b);
  assert.deepEqual(applyFossil(a, new Uint8Array(createDelta(a, new Uint8Array(0)))), new Uint8Array(0));
});

test("applyFossil: malformed deltas are a DeltaError, never a crash or a hang", () => {
  const base = enc.encode('{"score":[1,2,3,4,5,6,7,8,9,10],"name":"the home team"}');
  const good = delta(dec.decode(base), '{"score":[1,2,3,4,5,6,7,8,9,11],"name":"the home team"}');
  assert.ok(applyFossil(base, good));
  // Bad checksum: the last number changed.
  const text = dec.decode(good);
  const bad = text.slice(0, -2) + (text.at(-2) === "0" ? "1" : "0") + ";";
  assert.throws(() => applyFossil(base, enc.encode(bad)), (e) => e instanceof DeltaError && /checksum/.test(e.message));
  // Every truncation of a good delta.
  for (let n = 0; n < good.length; n++) {
    assert.throws(() => applyFossil(base, good.subarray(0, n)), DeltaError, `truncated at ${n}`);
  }
  // A huge claimed size: refused before anything is allocated (2^32-1 and 64 MiB + 1).
  assert.throws(() => applyFossil(base, enc.encode("3~~~~~\n0;")), /claims a result/);
  assert.throws(() => applyFossil(base, enc.encode("40001\n0;")), /claims a result/);
  // A number past 32 bits.
  assert.throws(() => applyFossil(base, enc.encode("~~~~~~~~~~\n")), /32 bits/);
  // A copy outside the base, an insert past the delta, an unknown command, bytes after the end.
  assert.throws(() => applyFossil(base, enc.encode("A\nA@zz,0;")), /past the end of the base/);
  assert.throws(() => applyFossil(base, enc.encode("A\nA:abc")), /past the end of the delta/);
  assert.throws(() => applyFossil(base, enc.encode("3\n3!abc0;")), /unknown command/);
  assert.throws(() => applyFossil(base, enc.encode("1\n1:a")), /no checksum/);
  const one = enc.encode(`1\n1:a${fossilChecksumText(enc.encode("a"))};x`);
  assert.throws(() => applyFossil(base, one), /after the checksum/);
  // More made than claimed, less made than claimed.
  assert.throws(() => applyFossil(base, enc.encode("1\n2:ab0;")), /past the claimed size/);
  assert.throws(() => applyFossil(base, enc.encode("3\n2:ab0;")), /2 bytes made, 3 claimed/);
  // Garbage of every byte never escapes as another error.
  let seed = 7;
  for (let i = 0; i < 2000; i++) {
    const g = new Uint8Array(1 + (i % 40)).map(() => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) >> 8) & 0xff);
    g[0] = 0x33; // '3'
    if (g.length > 1) g[1] = 10;
    try {
      applyFossil(base, g);
    } catch (e) {
      assert.ok(e instanceof DeltaError, String(e));
    }
  }
});

function fossilChecksumText(b) {
  const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
  let v = fossilChecksum(b);
  let s = "";
  do {
    s = digits[v & 63] + s;
    v = Math.floor(v / 64);
  } while (v > 0);
  return s;
}

test("the base of a frame: JSON text after the first \"data\": up to the final }, a poll answer's messages, MessagePack bytes", () => {
  assert.equal(jsonDataText('{"type":"message","topic":"a","id":"e-1","data":{"x":"}","y":[1]}}'), '{"x":"}","y":[1]}');
  assert.equal(jsonDataText('{"type":"message","topic":"a","id":"e-1","event":"data","data":"s"}'), '"s"');
  const answer =
    '{"messages":[{"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"["}},' +
    '{"type":"message","topic":"a","id":"e-2","delta":true,"data":"x"}],"cursor":"a=e-2"}';
  assert.deepEqual(pollMessageTexts(answer), [
    '{"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"["}}',
    '{"type":"message","topic":"a","id":"e-2","delta":true,"data":"x"}',
  ]);
  assert.deepEqual(pollMessageTexts('{"lost":[{"topic":"a","reason":"x"}],"messages":[],"cursor":"a=e-2"}'), []);
  const data = { n: 1, s: "x".repeat(40), l: [1, 2, { a: null }] };
  const frame = encodeMsgpack({ type: "message", topic: "a", id: "e-1", data });
  assert.deepEqual(msgpackDataBytes(frame), encodeMsgpack(data));
  assert.throws(() => msgpackDataBytes(frame.subarray(0, frame.length - 3)), DeltaError);
});

test("Bases: a delta without a base, or of a topic that did not ask, is a DeltaError", () => {
  const bases = new Bases((t) => t === "a");
  const m = { topic: "a", id: "e-2", data: deltaText("1", "2") };
  deltaMessages.add(m);
  assert.throws(() => bases.json(m, () => ""), /no base/);
  const full = { topic: "a", id: "e-1", data: { n: 1 } };
  assert.equal(bases.json(full, () => '{"type":"message","topic":"a","id":"e-1","data":{"n":1}}'), false);
  assert.equal(bases.size, 1);
  const d = { topic: "a", id: "e-2", data: deltaText('{"n":1}', '{"n":2}') };
  deltaMessages.add(d);
  assert.equal(bases.json(d, () => ""), true);
  assert.deepEqual(d.data, { n: 2 });
  // A failure drops the base: the next delta has none.
  const bad = { topic: "a", id: "e-3", data: "2\n2:xx0;" };
  deltaMessages.add(bad);
  assert.throws(() => bases.json(bad, () => ""), /checksum/);
  assert.equal(bases.size, 0);
  // A topic that did not ask keeps no base.
  const other = { topic: "b", id: "e-1", data: 1 };
  bases.json(other, () => '{"data":1}');
  assert.equal(bases.size, 0);
});

function until(what, cond, ms = 3000) {
  const end = Date.now() + ms;
  return new Promise((ok, fail) => {
    const check = () => (cond() ? ok() : Date.now() > end ? fail(new Error(`timed out waiting for ${what}`)) : setTimeout(check, 5));
    check();
  });
}

/** The state of topic `a` after message n. */
const state = (n) => ({ match: "a", score: [n, 0], log: "x".repeat(60), n });

/** A gateway stand-in for topic `a`: answers subscribe with the messages after the cursor,
 *  the first full and the next ones as deltas; message 3's delta is corrupted the first time
 *  it is sent (a bad checksum), so the client must subscribe again from 2. */
async function deltaGateway() {
  const wss = new WebSocketServer({ port: 0, handleProtocols: (p) => (p.has("herald.msgpack") ? "herald.msgpack" : false) });
  const frames = [];
  let corrupted = false;
  wss.on("connection", (sock) => {
    const mp = sock.protocol === "herald.msgpack";
    const send = (o) => (mp ? sock.send(encodeMsgpack(o)) : sock.send(JSON.stringify(o)));
    const bytes = (n) => (mp ? encodeMsgpack(state(n)) : enc.encode(JSON.stringify(state(n))));
    sock.on("message", (data, binary) => {
      const f = binary ? decodeMsgpack(new Uint8Array(data)) : JSON.parse(String(data));
      frames.push(f);
      if (f.type === "unsubscribe") send({ type: "unsubscribed", topics: f.topics });
      if (f.type !== "subscribe") return;
      const from = Number((f.cursors.a ?? "e-0").split("-")[1]);
      send({ type: "subscribed", topics: f.topics, cursors: { a: `e-${from}` } });
      for (let n = from + 1; n <= 4; n++) {
        if (n === from + 1) {
          send({ type: "message", topic: "a", id: `e-${n}`, data: state(n) });
          continue;
        }
        let d = new Uint8Array(createDelta(bytes(n - 1), bytes(n)));
        if (n === 3 && !corrupted) {
          corrupted = true;
          d = d.slice();
          d[d.length - 2] = d[d.length - 2] === 0x30 ? 0x31 : 0x30; // the checksum's last digit
        }
        send({ type: "message", topic: "a", id: `e-${n}`, delta: true, data: mp ? d : dec.decode(d) });
      }
    });
  });
  await new Promise((r) => wss.on("listening", r));
  return { wss, frames, port: wss.address().port };
}

for (const format of ["json", "msgpack"]) {
  test(`websocket (${format}): deltas applied; a bad one counted, not delivered, the topic subscribed again from its cursor`, async () => {
    const g = await deltaGateway();
    const h = new Herald(`http://127.0.0.1:${g.port}`, { transports: ["websocket"], WebSocket, format });
    const got = [];
    const errors = [];
    h.on("error", (e) => errors.push(e));
    h.subscribe("a", (m) => got.push(m), { delta: "fossil" });
    try {
      await until("4 messages", () => got.length >= 4);
      assert.deepEqual(got.map((m) => m.data), [1, 2, 3, 4].map(state));
      assert.deepEqual(got.map((m) => m.id), ["e-1", "e-2", "e-3", "e-4"]);
      // 2 applied, 3 failed (not delivered), then 3 full and 4 applied.
      assert.deepEqual(h.stats(), { deltas: 2, deltaFailures: 1, batches: 0 });
      assert.ok(errors.some((e) => e.code === "bad_delta"));
      const subs = g.frames.filter((f) => f.type === "subscribe");
      assert.equal(subs[0].delta, "fossil");
      assert.deepEqual(g.frames.filter((f) => f.type === "unsubscribe").map((f) => f.topics), [["a"]]);
      assert.deepEqual(subs[1], { type: "subscribe", topics: ["a"], cursors: { a: "e-2" }, delta: "fossil" });
      assert.equal(h.state, "open", "a bad delta does not cost the connection");
    } finally {
      h.close();
      g.wss.close();
    }
  });
}

test("websocket: a subscription without delta does not ask for it", async () => {
  const g = await deltaGateway();
  const h = new Herald(`http://127.0.0.1:${g.port}`, { transports: ["websocket"], WebSocket });
  h.subscribe("a", () => {});
  assert.throws(() => h.subscribe("b", () => {}, { delta: "zstd" }), /unknown delta/);
  try {
    await until("subscribe", () => g.frames.some((f) => f.type === "subscribe"));
    assert.equal(g.frames.find((f) => f.type === "subscribe").delta, undefined);
  } finally {
    h.close();
    g.wss.close();
  }
});

/** A JSON message frame of `a`: full, or a delta against message n-1. */
function frameText(n, asDelta, corrupt = false) {
  if (!asDelta) return JSON.stringify({ type: "message", topic: "a", id: `e-${n}`, data: state(n) });
  let d = deltaText(JSON.stringify(state(n - 1)), JSON.stringify(state(n)));
  if (corrupt) d = d.slice(0, -2) + (d.at(-2) === "0" ? "1" : "0") + ";";
  return JSON.stringify({ type: "message", topic: "a", id: `e-${n}`, delta: true, data: d });
}

test("long-poll: deltas within an answer; after a bad one nothing more of the topic, and the next poll resumes from the last delivered", async () => {
  const urls = [];
  let polls = 0;
  const fetch = async (url, init) => {
    urls.push(new URL(url));
    polls++;
    const body =
      polls === 1
        ? `{"messages":[${frameText(1, false)},${frameText(2, true)},${frameText(3, true, true)},${frameText(4, true)}],"cursor":"a=e-4"}`
        : polls === 2
          ? `{"messages":[${frameText(3, false)},${frameText(4, true)}],"cursor":"a=e-4"}`
          : await new Promise((_, fail) => init.signal.addEventListener("abort", () => fail(new Error("aborted")))); // held
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new Herald("http://127.0.0.1:1", { transports: ["poll"], fetch });
  const got = [];
  h.subscribe("a", (m) => got.push(m), { delta: "fossil" });
  try {
    await until("4 messages", () => got.length >= 4);
    assert.deepEqual(got.map((m) => m.data), [1, 2, 3, 4].map(state));
    assert.deepEqual(h.stats(), { deltas: 2, deltaFailures: 1, batches: 0 });
    assert.equal(urls[0].searchParams.get("delta"), "fossil");
    assert.equal(urls[1].searchParams.get("cursor"), "a=e-2");
  } finally {
    h.close();
  }
});

test("sse: deltas applied; a bad one restarts the stream from the last delivered, with delta=fossil and format=json", async () => {
  const reqs = [];
  const fetch = async (url, init) => {
    const u = new URL(url);
    reqs.push({ u, last: init.headers["last-event-id"] });
    const events =
      reqs.length === 1
        ? [frameText(1, false), frameText(2, true), frameText(3, true, true), frameText(4, true)]
        : [frameText(3, false), frameText(4, true)];
    const open = reqs.length === 1 ? "a=e-0" : "a=e-2";
    const text = `retry: 1000\nid: ${open}\n\n` + events.map((e, i) => `id: a=e-${i}\ndata: ${e}\n\n`).join("");
    const body = new ReadableStream({
      start(c) {
        c.enqueue(enc.encode(text));
        init.signal?.addEventListener("abort", () => c.error(new Error("aborted")));
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  };
  const h = new Herald("http://127.0.0.1:1", { transports: ["sse"], fetch });
  const got = [];
  h.subscribe("a", (m) => got.push(m), { delta: "fossil" });
  try {
    await until("4 messages", () => got.length >= 4);
    assert.deepEqual(got.map((m) => m.data), [1, 2, 3, 4].map(state));
    assert.deepEqual(h.stats(), { deltas: 2, deltaFailures: 1, batches: 0 });
    assert.equal(reqs[0].u.searchParams.get("delta"), "fossil");
    assert.equal(reqs[0].u.searchParams.get("format"), "json");
    assert.equal(reqs[1].last, "a=e-2");
  } finally {
    h.close();
  }
});
