// WebSocket batch frames (`?batch=1`, issue 41): several server frames packed into one
// WebSocket frame, a JSON array in a text frame or a MessagePack array in a binary one. The
// client asks for them by default (and offers no permessage-deflate through `ws`, on whose
// connections the gateway does not batch), unpacks them, each element exactly as if it had
// come alone (cursors, deltas against the element before, loss), counts them
// (`stats().batches`), and treats an element that is not an object as a malformed frame.
// Against a small local WebSocket server (the `ws` package) speaking Herald's frames.
import { test } from "node:test";
import assert from "node:assert/strict";
import { WebSocket, WebSocketServer } from "ws";
import { createDelta } from "fossil-delta";
import { Herald, encodeMsgpack, decodeMsgpack, ProtocolError } from "../dist/herald.js";
import { jsonArrayTexts, msgpackArrayItems } from "../dist/delta.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

function until(what, cond, ms = 3000) {
  const end = Date.now() + ms;
  return new Promise((ok, fail) => {
    const check = () => (cond() ? ok() : Date.now() > end ? fail(new Error(`timed out waiting for ${what}`)) : setTimeout(check, 5));
    check();
  });
}

/** The state of topic `a` after message n. */
const state = (n) => ({ match: "a", score: [n, 0], log: "x".repeat(60), n });

/** A gateway stand-in. Each connection: its URL and the extensions offered are kept; a
 *  `subscribe` is answered `subscribed` (from the cursor given), then `onSubscribe(from, c)`
 *  sends what the test wants with `c.one(frame)` (a frame alone) and `c.batch([frames])` (one
 *  batch frame, in the connection's format), or `c.raw(text or bytes)`. */
async function gateway(onSubscribe) {
  const wss = new WebSocketServer({ port: 0, handleProtocols: (p) => (p.has("herald.msgpack") ? "herald.msgpack" : false) });
  const conns = [];
  wss.on("connection", (sock, req) => {
    const mp = sock.protocol === "herald.msgpack";
    const c = {
      url: new URL(req.url, "http://x"),
      extensions: req.headers["sec-websocket-extensions"],
      got: [],
      one: (o) => sock.send(mp ? encodeMsgpack(o) : JSON.stringify(o)),
      batch: (list) => sock.send(mp ? encodeMsgpack(list) : JSON.stringify(list)),
      raw: (r) => sock.send(r),
      mp,
    };
    conns.push(c);
    sock.on("message", (data, binary) => {
      const f = binary ? decodeMsgpack(new Uint8Array(data)) : JSON.parse(String(data));
      c.got.push(f);
      if (f.type === "ping") c.one({ type: "pong" });
      if (f.type !== "subscribe") return;
      const from = Number((f.cursors.a ?? "e-0").split("-")[1]);
      c.one({ type: "subscribed", topics: f.topics, cursors: { a: `e-${from}` } });
      onSubscribe(from, c);
    });
  });
  await new Promise((r) => wss.on("listening", r));
  return { wss, conns, url: `http://127.0.0.1:${wss.address().port}` };
}

const msg = (n, data = n) => ({ type: "message", topic: "a", id: `e-${n}`, data });

for (const format of ["json", "msgpack"]) {
  test(`batch (${format}): asked for by default, no deflate offered; each element delivered in order as if alone, cursors and loss included; counted`, async () => {
    const g = await gateway((from, c) => {
      c.batch([msg(from + 1), msg(from + 2, { x: [1, "]"] }), msg(from + 3)]);
      c.batch([]); // a no-op
      c.one(msg(from + 4)); // single frames still come on the same connection
      c.batch([{ type: "lost", topic: "a", reason: "lagged" }, msg(from + 6), { type: "heartbeat" }]);
    });
    const h = new Herald(g.url, { transports: ["websocket"], WebSocket, format });
    const got = [];
    const lost = [];
    h.subscribe("a", (m) => got.push(m), { onLost: (l) => lost.push(l) });
    try {
      await until("5 messages", () => got.length >= 5);
      assert.deepEqual(got.map((m) => m.id), ["e-1", "e-2", "e-3", "e-4", "e-6"]);
      assert.deepEqual(got[1].data, { x: [1, "]"] });
      assert.deepEqual(lost, [{ topic: "a", reason: "lagged" }]);
      assert.equal(h.cursor("a"), "e-6");
      assert.deepEqual(h.stats(), { deltas: 0, deltaFailures: 0, batches: 3 });
      const c = g.conns[0];
      assert.equal(c.url.pathname, "/v1/ws");
      assert.equal(c.url.searchParams.get("batch"), "1");
      assert.equal(c.extensions, undefined, "ws is told not to offer permessage-deflate");
      assert.equal(h.state, "open");
      assert.equal(g.conns.length, 1);
    } finally {
      h.close();
      g.wss.close();
    }
  });

  test(`batch (${format}): deltas inside a batch apply against the element before, and across frames`, async () => {
    const bytes = (n) => (format === "msgpack" ? encodeMsgpack(state(n)) : enc.encode(JSON.stringify(state(n))));
    const delta = (n) => {
      const d = new Uint8Array(createDelta(bytes(n - 1), bytes(n)));
      return { type: "message", topic: "a", id: `e-${n}`, delta: true, data: format === "msgpack" ? d : dec.decode(d) };
    };
    const g = await gateway((from, c) => {
      // Once both topics are subscribed (a with deltas, b without: two frames): a full
      // message then deltas, in one batch; then a batch that starts with a delta against the
      // last element of the one before, with another topic's message between.
      if (c.got.filter((f) => f.type === "subscribe").length < 2) return;
      c.batch([msg(1, state(1)), delta(2), delta(3)]);
      c.batch([delta(4), { type: "message", topic: "b", id: "e-1", data: "other" }, delta(5)]);
      c.one(delta(6));
    });
    const h = new Herald(g.url, { transports: ["websocket"], WebSocket, format });
    const got = [];
    const errors = [];
    h.on("error", (e) => errors.push(e));
    h.subscribe("a", (m) => got.push(m), { delta: "fossil" });
    h.subscribe("b", (m) => got.push(m));
    try {
      await until("7 messages", () => got.length >= 7);
      assert.deepEqual(
        got.filter((m) => m.topic === "a").map((m) => m.data),
        [1, 2, 3, 4, 5, 6].map(state),
      );
      assert.deepEqual(got.filter((m) => m.topic === "b").map((m) => m.data), ["other"]);
      assert.deepEqual(h.stats(), { deltas: 5, deltaFailures: 0, batches: 2 });
      assert.deepEqual(errors, []);
    } finally {
      h.close();
      g.wss.close();
    }
  });

  test(`batch (${format}): an element that is not an object is a malformed frame: those before it delivered, an error, a reconnect from the cursor`, async () => {
    const g = await gateway((from, c) => {
      if (from === 0) c.batch([msg(1), 42, msg(2)]);
      else c.batch([msg(from + 1), msg(from + 2)]);
    });
    const h = new Herald(g.url, { transports: ["websocket"], WebSocket, format, random: () => 0, backoff: { base: 10, max: 10 } });
    const got = [];
    const errors = [];
    h.on("error", (e) => errors.push(e));
    h.subscribe("a", (m) => got.push(m.id));
    try {
      await until("3 messages", () => got.length >= 3);
      assert.deepEqual(got, ["e-1", "e-2", "e-3"]);
      assert.ok(errors[0] instanceof ProtocolError, String(errors[0]));
      assert.equal(errors[0].code, "protocol_error");
      assert.match(errors[0].message, /not an object \(element 2 of a batch of 3\)/);
      assert.equal(g.conns.length, 2);
      assert.deepEqual(g.conns[1].got.find((f) => f.type === "subscribe").cursors, { a: "e-1" });
      assert.deepEqual(h.stats().batches, 2);
    } finally {
      h.close();
      g.wss.close();
    }
  });
}

test("batch: false asks for none (no batch parameter); perMessageDeflate: true lets ws offer deflate", async () => {
  const g = await gateway((from, c) => c.one(msg(from + 1)));
  try {
    for (const [options, batch, deflate] of [
      [{ batch: false }, null, false],
      [{ perMessageDeflate: true }, "1", true],
      [{ batch: false, perMessageDeflate: true, token: "t" }, null, true],
    ]) {
      const h = new Herald(g.url, { transports: ["websocket"], WebSocket, ...options });
      const got = [];
      h.subscribe("a", (m) => got.push(m));
      await until("a message", () => got.length === 1);
      const c = g.conns.at(-1);
      assert.equal(c.url.searchParams.get("batch"), batch, JSON.stringify(options));
      assert.equal(/permessage-deflate/.test(c.extensions ?? ""), deflate, JSON.stringify(options));
      if (options.token) assert.equal(c.url.searchParams.get("token"), "t");
      assert.deepEqual(h.stats(), { deltas: 0, deltaFailures: 0, batches: 0 });
      h.close();
    }
    assert.throws(() => new Herald(g.url, { WebSocket, batch: "yes" }), /batch must be true or false/);
  } finally {
    g.wss.close();
  }
});

test("batch: a constructor without options (a browser's) gets a third argument it may ignore", async () => {
  const made = [];
  class FakeSocket {
    constructor(...args) {
      made.push(args);
      this.readyState = 0;
    }
    send() {}
    close() {}
  }
  const h = new Herald("http://gw.test", { transports: ["websocket"], WebSocket: FakeSocket, format: "msgpack" });
  h.subscribe("a", () => {});
  await until("a socket", () => made.length === 1);
  assert.deepEqual(made[0], ["ws://gw.test/v1/ws?batch=1", ["herald.msgpack"], { perMessageDeflate: false }]);
  h.close();
});

test("the raw elements of a batch: JSON texts (strings with brackets, whitespace) and MessagePack items", () => {
  const text = ' [ {"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"[,"}} ,\n{"type":"message","topic":"a","id":"e-2","data":[1,{"b":null}]},7,"s"] ';
  assert.deepEqual(jsonArrayTexts(text), [
    '{"type":"message","topic":"a","id":"e-1","data":{"q":"]}\\"[,"}}',
    '{"type":"message","topic":"a","id":"e-2","data":[1,{"b":null}]}',
    "7",
    '"s"',
  ]);
  assert.deepEqual(jsonArrayTexts("[]"), []);
  const items = [msg(1, { s: "x".repeat(300), l: [1, 2, 3] }), msg(2, new Uint8Array([1, 2]))];
  const many = Array.from({ length: 20 }, (_, i) => msg(i)); // past fixarray (0xdc)
  for (const list of [items, many, []]) {
    assert.deepEqual(msgpackArrayItems(encodeMsgpack(list)), list.map((o) => encodeMsgpack(o)));
  }
  assert.throws(() => msgpackArrayItems(encodeMsgpack({ a: 1 })), /not an array/);
});
