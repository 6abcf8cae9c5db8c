// What the application does to a connection from its backend (issue 16): server-side
// subscriptions and the personal topic, `last` on subscribe, and disconnects, on every
// transport. The client logic against scripted fake connections, then each real transport
// against a fake WebSocket or a fake fetch (no network).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Herald, HeraldError, personalTopic } from "../dist/herald.js";

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
const jwt = (claims) => `${b64({ alg: "HS256" })}.${b64({ exp: 4102444800, ...claims })}.sig`;

async function flush() {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

/** Waits (real timers) until `pred()` holds. */
async function until(what, pred, ms = 2000) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A Herald whose connections are fakes the test drives, with every event recorded. */
function setup(options = {}) {
  const conns = [];
  const seen = { serverSubscribe: [], serverUnsubscribe: [], serverMessage: [], lost: [], errors: [] };
  const herald = new Herald("http://gw.test", {
    random: () => 0,
    backoff: { base: 10, max: 10 },
    stableAfter: 0,
    ...options,
    connect: (transport, ctx, handlers) => {
      const c = {
        transport, ctx, handlers, closed: false,
        topicsAtStart: new Map(ctx.topics()),
        update() {}, refreshToken() {}, close() { this.closed = true; },
      };
      conns.push(c);
      return c;
    },
  });
  herald.on("serverSubscribe", (e) => seen.serverSubscribe.push(e));
  herald.on("serverUnsubscribe", (e) => seen.serverUnsubscribe.push(e));
  herald.on("serverMessage", (m) => seen.serverMessage.push(m.id));
  herald.on("lost", (l) => seen.lost.push(l));
  herald.on("error", (e) => seen.errors.push(e));
  return { herald, conns, seen };
}

// ---- the client, against fake connections ----

test("a server-side subscription is announced and its messages go to serverMessage, not to subscriptions", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket"] });
  const own = [];
  herald.subscribe("news", (m) => own.push(m.id));
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.serverSubscribed(["room:1"]);
  c.handlers.position("room:1", "e-4");
  assert.deepEqual(seen.serverSubscribe, [{ topics: ["room:1"] }]);
  assert.deepEqual(herald.serverTopics, ["room:1"]);
  assert.equal(herald.cursor("room:1"), "e-4");
  c.handlers.message({ topic: "room:1", id: "e-5", data: 5 });
  c.handlers.message({ topic: "room:1", id: "e-5", data: 5 }); // a duplicate: once
  c.handlers.message({ topic: "news", id: "f-1", data: 1 });
  c.handlers.message({ topic: "other", id: "c-1", data: 1 }); // neither: dropped
  assert.deepEqual(seen.serverMessage, ["e-5"]);
  assert.deepEqual(own, ["f-1"]);
  c.handlers.lost({ topic: "room:1", reason: "lagged" });
  assert.deepEqual(seen.lost, [{ topic: "room:1", reason: "lagged" }], "a server topic's loss goes to `lost`");
  c.handlers.serverUnsubscribed(["room:1"], false);
  assert.deepEqual(seen.serverUnsubscribe, [{ topics: ["room:1"], reason: "server" }]);
  assert.deepEqual(herald.serverTopics, []);
  assert.equal(herald.cursor("room:1"), undefined);
  c.handlers.message({ topic: "room:1", id: "e-6", data: 6 });
  assert.deepEqual(seen.serverMessage, ["e-5"], "nothing after the unsubscription");
  herald.close();
});

test("server-side subscriptions end with the connection; the personal topic is kept and resumed", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket", "sse"], token: jwt({ sub: "alice" }) });
  herald.subscribe("news", () => {});
  await flush();
  const c1 = conns[0];
  c1.handlers.open();
  // POST /v1/users/alice/send: subscribed from just before the message, then the message.
  c1.handlers.serverSubscribed(["user:alice", "room:1"]);
  c1.handlers.position("user:alice", "e-6");
  c1.handlers.message({ topic: "user:alice", id: "e-7", data: "hi" });
  assert.deepEqual(herald.serverTopics.sort(), ["room:1", "user:alice"]);
  assert.deepEqual([...c1.ctx.topics().keys()], ["news", "user:alice"], "the personal topic is now the client's to keep");
  c1.handlers.close({ reason: "cut" });
  assert.deepEqual(seen.serverUnsubscribe, [{ topics: ["room:1"], reason: "connection" }]);
  t.mock.timers.tick(100);
  await flush();
  const c2 = conns[1];
  assert.deepEqual([...c2.topicsAtStart], [["news", undefined], ["user:alice", "e-7"]], "resubscribed from its cursor");
  c2.handlers.open();
  c2.handlers.message({ topic: "user:alice", id: "e-8", data: "again" }); // held by the client: no announce needed
  assert.deepEqual(seen.serverMessage, ["e-7", "e-8"]);
  assert.deepEqual(herald.serverTopics, ["user:alice"]);
  // The application unsubscribes the personal topic: it is no longer kept.
  c2.handlers.serverUnsubscribed(["user:alice"], false);
  assert.deepEqual(seen.serverUnsubscribe.at(-1), { topics: ["user:alice"], reason: "server" });
  assert.deepEqual([...c2.ctx.topics().keys()], ["news"]);
  herald.close();
});

test("only the token's own personal topic is kept; personalTopic off keeps none", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  for (const [options, kept] of [[{ token: jwt({ sub: "bob" }) }, []], [{ token: jwt({ sub: "alice" }), personalTopic: "off" }, []]]) {
    const { herald, conns } = setup({ transports: ["websocket"], ...options });
    herald.subscribe("news", () => {});
    await flush();
    conns[0].handlers.open();
    conns[0].handlers.serverSubscribed(["user:alice", "conn:abc"]);
    conns[0].handlers.close({ reason: "cut" });
    t.mock.timers.tick(100);
    await flush();
    assert.deepEqual([...conns[1].topicsAtStart.keys()].filter((k) => k !== "news"), kept);
    herald.close();
  }
  assert.equal(personalTopic(jwt({ sub: "alice@example.com" })), "user:alice@example.com");
  assert.equal(personalTopic(jwt({ sub: "a/b" })), undefined, "not a topic name");
});

test("personalTopic always subscribes it from the start, on long-poll too", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["poll"], token: async () => jwt({ sub: "alice" }), personalTopic: "always" });
  await flush();
  await flush();
  assert.equal(conns.length, 1, "connects without any subscription");
  assert.deepEqual([...conns[0].topicsAtStart.keys()], ["user:alice"]);
  conns[0].handlers.open();
  conns[0].handlers.message({ topic: "user:alice", id: "e-1", data: 1 });
  assert.deepEqual(seen.serverMessage, ["e-1"]);
  herald.close();
});

test("a serverMessage listener opens a WebSocket without subscriptions; a probe's server topics are told when it takes over", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const conns = [];
  const told = [];
  const herald = new Herald("http://gw.test", {
    transports: ["websocket", "sse"],
    connect: (transport, ctx, handlers) => {
      const c = { transport, ctx, handlers, update() {}, refreshToken() {}, close() { this.closed = true; } };
      conns.push(c);
      return c;
    },
  });
  await flush();
  assert.equal(conns.length, 0, "nothing to connect for");
  herald.on("serverSubscribe", (e) => told.push(e.topics));
  herald.on("serverMessage", () => {});
  await flush();
  assert.equal(conns.length, 1);
  assert.equal(conns[0].transport, "websocket");
  conns[0].handlers.open();
  conns[0].handlers.serverSubscribed(["room:9"]);
  assert.deepEqual(told, [["room:9"]]);
  herald.close();
});

test("subscribing to a server topic takes its messages over; unsubscribing gives them back", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket"] });
  herald.subscribe("news", () => {});
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.serverSubscribed(["room:1"]);
  c.handlers.message({ topic: "room:1", id: "e-1", data: 1 });
  const own = [];
  const sub = herald.subscribe("room:1", (m) => own.push(m.id), { last: 50 });
  c.handlers.message({ topic: "room:1", id: "e-2", data: 2 });
  assert.equal(c.ctx.last("room:1"), 50);
  sub.unsubscribe();
  assert.equal(herald.cursor("room:1"), "e-2", "still held by the server: the cursor stays");
  c.handlers.message({ topic: "room:1", id: "e-3", data: 3 });
  assert.deepEqual([own, seen.serverMessage], [["e-2"], ["e-1", "e-3"]]);
  assert.throws(() => herald.subscribe("x", () => {}, { last: -1 }), RangeError);
  herald.close();
});

// ---- the WebSocket transport, against a fake WebSocket ----

class FakeSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.all.push(this);
  }
  send(text) { this.sent.push(JSON.parse(text)); }
  close() { this.readyState = 3; }
  accept() { this.readyState = 1; this.onopen?.(); }
  receive(frame) { this.onmessage?.({ data: JSON.stringify(frame) }); }
  closeByServer(code, reason) { this.readyState = 3; this.onclose?.({ code, reason }); }
}

test("websocket: `last` per subscribe frame, `by: server` frames are not replies, a dropped topic is asked for again", async () => {
  FakeSocket.all = [];
  const herald = new Herald("http://gw.test", { transports: ["websocket"], WebSocket: FakeSocket, openTimeout: 1000 });
  const seen = { sub: [], unsub: [], msgs: [] };
  herald.on("serverSubscribe", (e) => seen.sub.push(e.topics));
  herald.on("serverUnsubscribe", (e) => seen.unsub.push(e));
  herald.on("serverMessage", (m) => seen.msgs.push(m.data));
  const own = [];
  herald.subscribe("a", (m) => own.push(m.data), { last: 10 });
  herald.subscribe("b", () => {});
  await until("a socket", () => FakeSocket.all.length === 1);
  const ws = FakeSocket.all[0];
  ws.accept();
  assert.deepEqual(ws.sent, [
    { type: "subscribe", topics: ["a"], cursors: {}, last: 10 },
    { type: "subscribe", topics: ["b"], cursors: {} },
  ]);
  // A connect hook's subscription arrives first: it answers none of the two.
  ws.receive({ type: "subscribed", topics: ["conn:c1"], cursors: { "conn:c1": "e-0" }, by: "server" });
  ws.receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-3" } });
  ws.receive({ type: "subscribed", topics: ["b"], cursors: { b: "e-0" } });
  await until("open", () => herald.state === "open");
  const published = herald.publish("a", 1);
  await flush();
  ws.receive({ type: "subscribed", topics: ["room:1"], cursors: { "room:1": "e-9" }, by: "server" });
  ws.receive({ type: "published", topic: "a", id: "e-4" });
  assert.deepEqual(await published, { id: "e-4", topic: "a" }, "the reply went to its command");
  ws.receive({ type: "message", topic: "room:1", id: "e-10", data: "to the room" });
  ws.receive({ type: "message", topic: "a", id: "e-4", data: 1 });
  assert.deepEqual(seen.sub, [["conn:c1"], ["room:1"]]);
  assert.deepEqual([seen.msgs, own], [["to the room"], [1]]);
  // The application drops room:1 and, with it, the client's own `a`: `a` is asked for again.
  ws.sent.length = 0;
  ws.receive({ type: "unsubscribed", topics: ["room:1", "a"], by: "server" });
  await flush();
  assert.deepEqual(seen.unsub, [{ topics: ["room:1"], reason: "server" }]);
  assert.deepEqual(ws.sent, [{ type: "subscribe", topics: ["a"], cursors: { a: "e-4" } }], "from its cursor: no `last`");
  herald.close();
});

test("websocket: close 4000 reconnects and loses the server topics; 4001 closes for good", async () => {
  FakeSocket.all = [];
  const herald = new Herald("http://gw.test", {
    transports: ["websocket"], WebSocket: FakeSocket, random: () => 0, stableAfter: 0, openTimeout: 1000,
  });
  const unsub = [];
  const errors = [];
  herald.on("serverUnsubscribe", (e) => unsub.push(e));
  herald.on("error", (e) => errors.push(e));
  herald.subscribe("a", () => {});
  await until("a socket", () => FakeSocket.all.length === 1);
  FakeSocket.all[0].accept();
  FakeSocket.all[0].receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-1" } });
  FakeSocket.all[0].receive({ type: "subscribed", topics: ["room:1"], cursors: { "room:1": "e-1" }, by: "server" });
  FakeSocket.all[0].closeByServer(4000, "moved");
  assert.deepEqual(unsub, [{ topics: ["room:1"], reason: "connection" }]);
  await until("a second socket", () => FakeSocket.all.length === 2);
  FakeSocket.all[1].accept();
  assert.deepEqual(FakeSocket.all[1].sent, [{ type: "subscribe", topics: ["a"], cursors: { a: "e-1" } }]);
  FakeSocket.all[1].receive({ type: "subscribed", topics: ["a"], cursors: { a: "e-1" } });
  FakeSocket.all[1].closeByServer(4001, "banned");
  assert.equal(herald.state, "closed");
  assert.ok(errors.at(-1) instanceof HeraldError);
  assert.deepEqual([errors.at(-1).code, errors.at(-1).reason], ["disconnected", "banned"]);
});

// ---- SSE and long-poll, against a fake fetch ----

/** A fetch whose answers the test gives: `sse(text)` streams, `json(body)` answers a poll. */
function fakeFetch() {
  const requests = [];
  const fetch = (url, init) => {
    const u = new URL(url);
    return new Promise((resolve, reject) => {
      const req = { url: u, headers: init.headers, resolve, done: false };
      init.signal?.addEventListener("abort", () => {
        req.done = true;
        reject(new DOMException("aborted", "AbortError"));
        req.controller?.error(new DOMException("aborted", "AbortError"));
      });
      req.sse = () => {
        const body = new ReadableStream({ start: (c) => { req.controller = c; } });
        resolve(new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } }));
        return {
          push: (text) => req.controller.enqueue(new TextEncoder().encode(text)),
          end: () => req.controller.close(),
        };
      };
      req.json = (body) => {
        req.done = true;
        resolve(new Response(JSON.stringify(body), { status: 200, headers: { "content-type": "application/json" } }));
      };
      requests.push(req);
    });
  };
  return { fetch, requests };
}

test("sse: `last` in the query without a cursor, herald.subscribed / unsubscribed, a restart loses server topics", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["sse"], fetch, openTimeout: 2000 });
  const seen = { sub: [], unsub: [], msgs: [] };
  herald.on("serverSubscribe", (e) => seen.sub.push(e.topics));
  herald.on("serverUnsubscribe", (e) => seen.unsub.push(e));
  herald.on("serverMessage", (m) => seen.msgs.push(m.data));
  const own = [];
  herald.subscribe("a", (m) => own.push(m.data), { last: 5 });
  await until("a request", () => requests.length === 1);
  const r1 = requests[0];
  assert.deepEqual(r1.url.searchParams.getAll("topic"), ["a"]);
  assert.equal(r1.url.searchParams.get("last"), "5");
  const s = r1.sse();
  s.push("retry: 3000\nid: a=e-2\n\n");
  s.push('id: a=e-3\ndata: {"type":"message","topic":"a","id":"e-3","data":3}\n\n');
  s.push('id: a=e-3,user:alice=f-6\nevent: herald.subscribed\ndata: {"topics":["user:alice"]}\n\n');
  s.push('id: a=e-3,user:alice=f-7\ndata: {"type":"message","topic":"user:alice","id":"f-7","data":"hi"}\n\n');
  await until("the personal message", () => seen.msgs.length === 1);
  assert.deepEqual(seen.sub, [["user:alice"]]);
  assert.deepEqual([own, seen.msgs], [[3], ["hi"]]);
  assert.equal(herald.cursor("user:alice"), "f-7");
  // No token with a `sub`: the personal topic is not kept; a new topic restarts the stream.
  herald.subscribe("b", () => {}, { last: 2 });
  await until("a second request", () => requests.length === 2);
  assert.deepEqual(seen.unsub, [{ topics: ["user:alice"], reason: "connection" }]);
  const r2 = requests[1];
  assert.deepEqual(r2.url.searchParams.getAll("topic"), ["a", "b"]);
  assert.equal(r2.url.searchParams.get("last"), "2", "for b, which has no cursor");
  assert.equal(r2.headers["last-event-id"], "a=e-3");
  const s2 = r2.sse();
  s2.push("retry: 3000\nid: a=e-3,b=c-1\n\n");
  s2.push('id: a=e-3,b=c-1,room:1=d-1\nevent: herald.subscribed\ndata: {"topics":["room:1"]}\n\n');
  await until("room:1", () => seen.sub.length === 2);
  // A subscription to a topic the stream holds already does not restart it.
  herald.subscribe("room:1", () => {});
  await flush();
  assert.equal(requests.length, 2);
  s2.push('id: a=e-3,b=c-1\nevent: herald.unsubscribed\ndata: {"topics":["room:1"]}\n\n');
  await until("a third request: room:1 asked for by the client", () => requests.length === 3);
  assert.deepEqual(requests[2].url.searchParams.getAll("topic"), ["a", "b", "room:1"]);
  assert.equal(seen.unsub.length, 1, "the client holds room:1 itself: not told as lost");
  herald.close();
});

test("poll: a disconnect with reconnect:true polls again; reconnect:false stops with the reason", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", {
    transports: ["poll"], fetch, random: () => 0, stableAfter: 0, openTimeout: 2000, pollTimeout: 1,
  });
  const errors = [];
  const got = [];
  herald.on("error", (e) => errors.push(e));
  herald.subscribe("a", (m) => got.push(m.data), { last: 3 });
  await until("a poll", () => requests.length === 1);
  assert.equal(requests[0].url.searchParams.get("last"), "3");
  assert.equal(requests[0].url.searchParams.get("cursor"), null);
  requests[0].json({
    messages: [{ type: "message", topic: "a", id: "e-4", data: 4 }, { type: "message", topic: "a", id: "e-5", data: 5 }],
    lost: [], cursor: "a=e-5",
  });
  await until("the next poll", () => requests.length === 2);
  assert.equal(requests[1].url.searchParams.get("last"), null, "a cursor now: no `last`");
  assert.equal(requests[1].url.searchParams.get("cursor"), "a=e-5");
  requests[1].json({ messages: [{ type: "message", topic: "a", id: "e-6", data: 6 }], lost: [], cursor: "a=e-6",
    disconnect: { reason: "moved", reconnect: true } });
  await until("a poll after the disconnect", () => requests.length === 3);
  assert.match(errors.at(-1).message, /poll: disconnected: moved/);
  assert.equal(requests[2].url.searchParams.get("cursor"), "a=e-6", "the messages of that answer were delivered");
  requests[2].json({ messages: [], lost: [], cursor: "a=e-6", disconnect: { reason: "logged out", reconnect: false } });
  await until("closed", () => herald.state === "closed");
  assert.ok(errors.at(-1) instanceof HeraldError);
  assert.deepEqual([errors.at(-1).code, errors.at(-1).reason], ["disconnected", "logged out"]);
  assert.deepEqual(got, [4, 5, 6]);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(requests.length, 3, "no poll after it");
});

test("poll: a connect hook's topics in the cursor are server topics, sent back in the cursor", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["poll"], fetch, openTimeout: 2000, pollTimeout: 1 });
  const seen = { sub: [], unsub: [], msgs: [] };
  herald.on("serverSubscribe", (e) => seen.sub.push(e.topics));
  herald.on("serverUnsubscribe", (e) => seen.unsub.push(e));
  herald.on("serverMessage", (m) => seen.msgs.push(m.data));
  herald.subscribe("a", () => {});
  await until("a poll", () => requests.length === 1);
  requests[0].json({ messages: [{ type: "message", topic: "room:1", id: "d-2", data: "x" }], lost: [], cursor: "a=e-1,room:1=d-2" });
  await until("the next poll", () => requests.length === 2);
  assert.deepEqual([seen.sub, seen.msgs], [[["room:1"]], ["x"]]);
  assert.deepEqual(requests[1].url.searchParams.getAll("topic"), ["a"]);
  assert.equal(requests[1].url.searchParams.get("cursor"), "a=e-1,room:1=d-2");
  requests[1].json({ messages: [], lost: [], cursor: "a=e-1" });
  await until("the third poll", () => requests.length >= 3);
  assert.deepEqual(seen.unsub, [{ topics: ["room:1"], reason: "server" }]);
  assert.equal(requests[2].url.searchParams.get("cursor"), "a=e-1");
  herald.close();
});
