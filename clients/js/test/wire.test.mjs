// The wire (wire.ts, msgpack.ts) and what the transports do with it: malformed frames and
// events end the connection with an error event and a reconnect from the cursors; a silent
// connection is given up after the dead-connection timeout; MessagePack on the WebSocket;
// history; starting from given cursors; the order of `state` and `transport`; a WebSocket
// given as an option. Against a fake WebSocket and a fake fetch (no network).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Herald, ProtocolError, encodeMsgpack, decodeMsgpack, MsgpackError } from "../dist/herald.js";

async function flush() {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}

async function until(what, cond, ms = 2000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const hex = (b) => Buffer.from(b).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));

// ---- MessagePack ----

test("msgpack: the spec's encodings, each the smallest", () => {
  const cases = [
    [null, "c0"], [false, "c2"], [true, "c3"], [0, "00"], [127, "7f"], [128, "cc80"], [256, "cd0100"],
    [65536, "ce00010000"], [2 ** 40, "cf0000010000000000"], [-1, "ff"], [-32, "e0"], [-33, "d0df"],
    [-129, "d1ff7f"], [-32769, "d2ffff7fff"], [-(2 ** 40), "d3ffffff0000000000"], [0.5, "cb3fe0000000000000"],
    ["", "a0"], ["a", "a161"], ["x".repeat(32), "d920" + "78".repeat(32)], [[1, 2], "920102"],
    [{ a: 1 }, "81a16101"], [new Uint8Array([1, 2, 3]), "c403010203"], [2n ** 63n, "cf8000000000000000"],
    [-0, "00"],
  ];
  for (const [v, h] of cases) assert.equal(hex(encodeMsgpack(v)), h, `encode ${String(v)}`);
  // As JSON.stringify: undefined properties left out, toJSON used, non-finite numbers nil.
  assert.equal(hex(encodeMsgpack({ a: undefined, b: () => 1, c: NaN })), "81a163c0");
  assert.deepEqual(decodeMsgpack(encodeMsgpack({ d: new Date(0) })), { d: "1970-01-01T00:00:00.000Z" });
});

test("msgpack: decodes every type, round-trips, and refuses what is not MessagePack", () => {
  const v = { n: 1, neg: -2, f: 3.25, s: "héllo ✓", list: [1, 2.5, null, true], nested: { a: [1, -2, 3.25] }, big: 2 ** 40 };
  assert.deepEqual(decodeMsgpack(encodeMsgpack(v)), v);
  // Past the encoder's first buffer, and past 16- and 32-bit lengths.
  const large = { s: "é".repeat(40000), list: Array.from({ length: 70000 }, (_, i) => i * 1000), m: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])) };
  assert.deepEqual(decodeMsgpack(encodeMsgpack(large)), large);
  assert.deepEqual(decodeMsgpack(bytes("ca3fc00000")), 1.5, "float32");
  assert.deepEqual(decodeMsgpack(bytes("c403010203")), new Uint8Array([1, 2, 3]), "bin");
  assert.equal(decodeMsgpack(bytes("cf8000000000000000")), 2n ** 63n, "past 2^53: a bigint");
  assert.equal(decodeMsgpack(bytes("cf0000010000000000")), 2 ** 40, "within 2^53: a number");
  const proto = decodeMsgpack(encodeMsgpack(JSON.parse('{"__proto__": 1}')));
  assert.equal(Object.getPrototypeOf(proto), Object.prototype, "__proto__ is an own key, as JSON.parse makes it");
  assert.equal(proto.__proto__, 1);
  for (const [h, why] of [
    ["", "empty"], ["a261", "truncated string"], ["92 01", "truncated array"], ["c1", "never used"],
    ["d401 00", "extension"], ["81 01 02", "integer key"], ["a2 c328", "not UTF-8"], ["0000", "trailing bytes"],
    ["dd ffffffff", "a count past the bytes"],
  ]) {
    assert.throws(() => decodeMsgpack(bytes(h.replace(/ /g, ""))), MsgpackError, why);
  }
  assert.throws(() => decodeMsgpack(new Uint8Array(200).fill(0x91)), MsgpackError, "nested too deep");
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => encodeMsgpack(cyclic), TypeError);
});

// ---- a fake WebSocket, JSON or MessagePack ----

class FakeSocket {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.protocol = "";
    this.readyState = 0;
    this.sent = [];
    this.binaryType = "blob";
    FakeSocket.all.push(this);
  }
  send(data) {
    this.sent.push(typeof data === "string" ? JSON.parse(data) : decodeMsgpack(data));
  }
  close(code) { this.readyState = 3; this.closedWith = code; }
  /** As Node's `ws` has: dropped at once, no closing handshake. */
  terminate() { this.readyState = 3; this.terminated = true; }
  accept(protocol = "") { this.protocol = protocol; this.readyState = 1; this.onopen?.(); }
  receive(frame) { this.onmessage?.({ data: JSON.stringify(frame) }); }
  receiveRaw(data) { this.onmessage?.({ data }); }
  receivePacked(frame) {
    const b = encodeMsgpack(frame);
    this.onmessage?.({ data: b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) });
  }
  closeByServer(code, reason) { this.readyState = 3; this.onclose?.({ code, reason }); }
}

function wsHerald(options = {}) {
  FakeSocket.all = [];
  const herald = new Herald("http://gw.test", {
    transports: ["websocket"], WebSocket: FakeSocket, random: () => 0, stableAfter: 0, openTimeout: 1000, ...options,
  });
  const errors = [];
  herald.on("error", (e) => errors.push(e));
  return { herald, errors };
}

test("websocket: a malformed frame is an error event and a reconnect from the cursors, never a silent skip", async () => {
  const { herald, errors } = wsHerald();
  const got = [];
  herald.subscribe("a", (m) => got.push(m.id));
  await until("a socket", () => FakeSocket.all.length === 1);
  const ws = FakeSocket.all[0];
  ws.accept();
  ws.receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-0" } });
  ws.receive({ type: "message", topic: "a", id: "e-1", data: 1 });
  ws.receiveRaw('{"type":"message","topic":');
  assert.equal(errors.length, 1);
  assert.ok(errors[0] instanceof ProtocolError);
  assert.equal(errors[0].code, "protocol_error");
  assert.equal(ws.terminated, true, "the connection is given up at once");
  assert.equal(herald.state, "reconnecting");
  await until("a second socket", () => FakeSocket.all.length === 2);
  FakeSocket.all[1].accept();
  assert.deepEqual(FakeSocket.all[1].sent, [{ type: "subscribe", topics: ["a"], cursors: { a: "e-1" } }]);
  // A message without its id, and a frame that is not an object, are malformed too; a type of
  // a later version is not.
  FakeSocket.all[1].receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-1" } });
  FakeSocket.all[1].receive({ type: "join", topic: "a", conn: "c" });
  FakeSocket.all[1].receive({ type: "some-later-frame" });
  assert.equal(errors.length, 1);
  FakeSocket.all[1].receive({ type: "message", topic: "a", data: 2 });
  assert.equal(errors.length, 2);
  await until("a third socket", () => FakeSocket.all.length === 3);
  FakeSocket.all[2].accept();
  FakeSocket.all[2].receive([1, 2]);
  assert.equal(errors.length, 3);
  assert.deepEqual(got, ["e-1"]);
  herald.close();
});

test("websocket: a silent connection is pinged halfway and given up after deadTimeout", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, errors } = wsHerald({ deadTimeout: 3000 });
  herald.subscribe("a", () => {});
  await flush();
  const ws = FakeSocket.all[0];
  ws.accept();
  ws.receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-5" } });
  ws.sent.length = 0;
  // Traffic keeps it alive.
  for (let i = 0; i < 4; i++) {
    t.mock.timers.tick(1000);
    ws.receive({ type: "message", topic: "a", id: `e-${6 + i}`, data: i });
  }
  assert.deepEqual(ws.sent, [], "no ping while messages arrive");
  t.mock.timers.tick(1500);
  assert.deepEqual(ws.sent, [{ type: "ping" }], "a ping after half the timeout in silence");
  ws.receive({ type: "pong" });
  t.mock.timers.tick(2900);
  assert.equal(errors.length, 0, "the pong was a sign of life");
  assert.deepEqual(ws.sent, [{ type: "ping" }, { type: "ping" }]);
  t.mock.timers.tick(200);
  assert.equal(errors.length, 1);
  assert.match(errors[0].message, /nothing received for \d+ ms/);
  assert.equal(ws.terminated, true, "a dead peer is not waited for (terminate, where the implementation has it)");
  t.mock.timers.tick(10);
  await flush();
  assert.equal(FakeSocket.all.length, 2, "reconnected");
  FakeSocket.all[1].accept();
  assert.deepEqual(FakeSocket.all[1].sent, [{ type: "subscribe", topics: ["a"], cursors: { a: "e-9" } }]);
  herald.close();
});

test("websocket: deadTimeout 0 never gives a connection up", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, errors } = wsHerald({ deadTimeout: 0 });
  herald.subscribe("a", () => {});
  await flush();
  FakeSocket.all[0].accept();
  FakeSocket.all[0].receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-5" } });
  t.mock.timers.tick(10 * 60 * 1000);
  assert.deepEqual([errors.length, FakeSocket.all[0].sent.length, herald.state], [0, 1, "open"]);
  herald.close();
});

test("websocket: format msgpack offers herald.msgpack and speaks binary frames both ways", async () => {
  const { herald, errors } = wsHerald({ format: "msgpack" });
  const got = [];
  herald.subscribe("m", (m) => got.push(m));
  await until("a socket", () => FakeSocket.all.length === 1);
  const ws = FakeSocket.all[0];
  assert.deepEqual(ws.protocols, ["herald.msgpack"]);
  ws.accept("herald.msgpack");
  assert.equal(ws.binaryType, "arraybuffer");
  assert.deepEqual(ws.sent, [{ type: "subscribe", topics: ["m"], cursors: {} }]);
  ws.receivePacked({ type: "subscribed", topics: ["m"], cursors: { m: "e-0" } });
  await until("open", () => herald.state === "open");
  ws.receivePacked({ type: "message", topic: "m", id: "e-1", data: { big: 2 ** 40, f: 0.5, b: new Uint8Array([1]) } });
  // A Node Buffer (the `ws` package's binary frames) reads the same.
  ws.receiveRaw(Buffer.from(encodeMsgpack({ type: "message", topic: "m", id: "e-2", event: "x", data: "s" })));
  assert.deepEqual(got, [
    { topic: "m", id: "e-1", data: { big: 2 ** 40, f: 0.5, b: new Uint8Array([1]) } },
    { topic: "m", id: "e-2", event: "x", data: "s" },
  ]);
  const p = herald.publish("m", { k: 1, f: 0.5 });
  await flush();
  assert.deepEqual(ws.sent.at(-1), { type: "publish", topic: "m", data: { k: 1, f: 0.5 } });
  ws.receivePacked({ type: "published", topic: "m", id: "e-3" });
  assert.deepEqual(await p, { id: "e-3", topic: "m" });
  assert.equal(errors.length, 0);
  // A text frame on a MessagePack connection is malformed.
  ws.receive({ type: "message", topic: "m", id: "e-4", data: 1 });
  assert.ok(errors[0] instanceof ProtocolError);
  herald.close();
});

test("websocket: msgpack asked for and not accepted by the gateway is an error, not JSON in disguise", async () => {
  const { herald, errors } = wsHerald({ format: "msgpack" });
  herald.subscribe("m", () => {});
  await until("a socket", () => FakeSocket.all.length === 1);
  FakeSocket.all[0].accept("");
  assert.equal(errors.length, 1);
  assert.match(errors[0].message, /herald\.msgpack/);
  herald.close();
});

test("state listeners read the transport that opened; `transport` follows", async () => {
  const { herald } = wsHerald();
  const seen = [];
  herald.on("state", (s) => seen.push(["state", s, herald.transport]));
  herald.on("transport", (t) => seen.push(["transport", t, herald.transport]));
  herald.subscribe("a", () => {});
  await until("a socket", () => FakeSocket.all.length === 1);
  FakeSocket.all[0].accept();
  FakeSocket.all[0].receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-0" } });
  assert.deepEqual(seen, [["state", "open", "websocket"], ["transport", "websocket", "websocket"]]);
  herald.close();
});

test("without a WebSocket the websocket transport is skipped with an error event, not in silence", async () => {
  const saved = globalThis.WebSocket;
  try {
    delete globalThis.WebSocket;
    const herald = new Herald("http://gw.test", { transports: ["websocket", "sse"], fetch: () => new Promise(() => {}) });
    const errors = [];
    herald.on("error", (e) => errors.push(e.message));
    await flush();
    assert.equal(errors.length, 1);
    assert.match(errors[0], /options\.WebSocket/);
    herald.close();
    assert.throws(() => new Herald("http://gw.test", { transports: ["websocket"] }), TypeError);
  } finally {
    if (saved) globalThis.WebSocket = saved;
  }
});

// ---- SSE and long-poll, against a fake fetch ----

function fakeFetch() {
  const requests = [];
  const fetch = (url, init = {}) => {
    const u = new URL(url);
    return new Promise((resolve, reject) => {
      const req = { url: u, headers: init.headers ?? {}, resolve, done: false };
      init.signal?.addEventListener("abort", () => {
        req.done = true;
        reject(new DOMException("aborted", "AbortError"));
        try { req.controller?.error(new DOMException("aborted", "AbortError")); } catch { /* closed */ }
      });
      req.sse = () => {
        const body = new ReadableStream({ start: (c) => { req.controller = c; } });
        resolve(new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } }));
        return { push: (text) => req.controller.enqueue(new TextEncoder().encode(text)) };
      };
      req.json = (body, status = 200) => {
        req.done = true;
        resolve(new Response(typeof body === "string" ? body : JSON.stringify(body), { status, headers: { "content-type": "application/json" } }));
      };
      requests.push(req);
    });
  };
  return { fetch, requests };
}

test("sse: a malformed event is an error event and a reconnect with Last-Event-ID", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["sse"], fetch, random: () => 0, stableAfter: 0, openTimeout: 2000 });
  const errors = [];
  const got = [];
  herald.on("error", (e) => errors.push(e));
  herald.subscribe("a", (m) => got.push(m.id));
  await until("a request", () => requests.length === 1);
  assert.equal(requests[0].url.searchParams.get("heartbeat"), "22", "two heartbeats within the default 45 s");
  const s = requests[0].sse();
  s.push("retry: 3000\nid: a=e-0\n\n");
  s.push('id: a=e-1\ndata: {"type":"message","topic":"a","id":"e-1","data":1}\n\n');
  s.push('data: {"type":"message","topic":\n\n');
  await until("a second request", () => requests.length === 2);
  assert.equal(errors.length, 1);
  assert.ok(errors[0] instanceof ProtocolError);
  assert.equal(requests[1].headers["last-event-id"], "a=e-1");
  // A loss event that is not JSON, and a message that is not a message object, alike.
  requests[1].sse().push('id: a=e-1\n\nevent: herald.lost\ndata: {"topic"\n\n');
  await until("a third request", () => requests.length === 3);
  requests[2].sse().push('id: a=e-1\n\ndata: {"type":"message","topic":"a"}\n\n');
  await until("a fourth request", () => requests.length === 4);
  assert.equal(errors.length, 3);
  assert.deepEqual(got, ["e-1"]);
  herald.close();
});

test("sse: a silent stream is given up after deadTimeout; a heartbeat out of the gateway's bounds falls back to its default", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", {
    transports: ["sse"], fetch, random: () => 0, stableAfter: 0, openTimeout: 2000, deadTimeout: 300,
  });
  const errors = [];
  herald.on("error", (e) => errors.push(e.message));
  herald.subscribe("a", () => {});
  await until("a request", () => requests.length === 1);
  assert.equal(requests[0].url.searchParams.get("heartbeat"), "1");
  const s = requests[0].sse();
  s.push("retry: 3000\nid: a=e-4\n\n");
  await until("open", () => herald.state === "open");
  // Heartbeats keep it alive.
  for (let i = 0; i < 4; i++) {
    await new Promise((r) => setTimeout(r, 100));
    s.push(": ping\n\n");
  }
  assert.deepEqual(errors, []);
  await until("a second request", () => requests.length === 2, 2000);
  assert.match(errors[0], /sse: nothing received for \d+ ms/);
  assert.equal(requests[1].headers["last-event-id"], "a=e-4");
  // The gateway refuses the heartbeat asked for: asked again without, at once, no error.
  requests[1].json({ code: "bad_heartbeat", reason: "heartbeat must be 5..300 s" }, 400);
  await until("a third request", () => requests.length === 3);
  assert.equal(requests[2].url.searchParams.get("heartbeat"), null);
  assert.equal(errors.length, 1);
  requests[2].sse().push("id: a=e-4\n\n");
  await until("open again", () => herald.state === "open");
  herald.close();
});

test("poll: a malformed answer is an error event and the next poll goes on from the cursors", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["poll"], fetch, random: () => 0, stableAfter: 0, openTimeout: 2000, pollTimeout: 1 });
  const errors = [];
  herald.on("error", (e) => errors.push(e));
  herald.subscribe("a", () => {});
  await until("a poll", () => requests.length === 1);
  requests[0].json({ messages: [{ type: "message", topic: "a", id: "e-1", data: 1 }], cursor: "a=e-1" });
  await until("a second poll", () => requests.length === 2);
  requests[1].json('{"messages": [');
  await until("a third poll", () => requests.length === 3);
  assert.ok(errors[0] instanceof ProtocolError);
  assert.equal(requests[2].url.searchParams.get("cursor"), "a=e-1");
  requests[2].json({ messages: [{ type: "message", topic: "a" }], cursor: "a=e-2" });
  await until("a fourth poll", () => requests.length === 4);
  assert.equal(errors.length, 2);
  assert.equal(requests[3].url.searchParams.get("cursor"), "a=e-1", "the malformed answer moved no cursor");
  herald.close();
});

// ---- history, cursors ----

test("history: a page of a topic's history, with the token, oldest first", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["sse"], fetch, token: "t0k" });
  const page = herald.history("news", { limit: 2, since: "e-3" });
  await until("a request", () => requests.length === 1);
  const r = requests[0];
  assert.equal(r.url.pathname, "/v1/topics/news/history");
  assert.deepEqual([r.url.searchParams.get("limit"), r.url.searchParams.get("since")], ["2", "e-3"]);
  assert.equal(r.headers.authorization, "Bearer t0k");
  r.json({
    topic: "news", lost: null, more: true, next: "e-5",
    messages: [{ type: "message", topic: "news", id: "e-4", data: 4 }, { type: "message", topic: "news", id: "e-5", event: "x", data: 5 }],
  });
  assert.deepEqual(await page, {
    topic: "news", lost: undefined, more: true, next: "e-5",
    messages: [{ topic: "news", id: "e-4", data: 4 }, { topic: "news", id: "e-5", event: "x", data: 5 }],
  });
  const refused = herald.history("secret");
  await until("a second request", () => requests.length === 2);
  requests[1].json({ code: "forbidden", reason: "not yours" }, 403);
  await assert.rejects(refused, (e) => e.code === "forbidden" && e.status === 403);
  await assert.rejects(herald.history("news", { limit: 0 }), RangeError);
  await assert.rejects(herald.history("bad topic"), TypeError);
  herald.close();
});

test("cursors: a client starts from given cursors, by name and under a pattern, and reports every cursor it holds", async () => {
  const { herald } = wsHerald({ cursors: { a: "e-7", "p.x": "e-3", other: "e-1" } });
  assert.throws(() => new Herald("http://gw.test", { cursors: { a: "nope" } }), TypeError);
  herald.subscribe("a", () => {});
  herald.subscribe("p.*", () => {});
  await until("a socket", () => FakeSocket.all.length === 1);
  const ws = FakeSocket.all[0];
  ws.accept();
  assert.deepEqual(ws.sent, [{ type: "subscribe", topics: ["a", "p.*"], cursors: { a: "e-7", "p.x": "e-3" } }]);
  ws.receive({ type: "subscribed", topics: ["a", "p.*"], cursors: { a: "e-7" } });
  ws.receive({ type: "message", topic: "a", id: "e-8", data: 1 });
  ws.receive({ type: "message", topic: "p.y", id: "f-1", data: 1 });
  assert.deepEqual(herald.cursors(), { a: "e-8", "p.x": "e-3", other: "e-1", "p.y": "f-1" });
  herald.close();
});
