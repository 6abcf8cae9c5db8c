// Prefix patterns (`orders.*`, docs/protocol.md "Prefix patterns"): validation and matching as
// the gateway does them, routing to handlers, one cursor per delivered topic (bounded as the
// gateway bounds them) carried across reconnects and fallbacks, and what each real transport
// sends, against scripted fake connections, a fake WebSocket and a fake fetch (no network).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Herald, MAX_PATTERN_TOPICS, isPattern, matchesPattern, subscriptionError } from "../dist/herald.js";

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

/** A Herald whose connections are fakes the test drives. */
function setup(options = {}) {
  const conns = [];
  const seen = { lost: [], serverSubscribe: [], serverMessage: [], errors: [] };
  const herald = new Herald("http://gw.test", {
    random: () => 0,
    backoff: { base: 10, max: 10 },
    stableAfter: 0,
    ...options,
    connect: (transport, ctx, handlers) => {
      const c = {
        transport, ctx, handlers, closed: false, updates: 0,
        topicsAtStart: new Map(ctx.topics()),
        patternCursorsAtStart: new Map(ctx.patternCursors()),
        update() { this.updates++; }, refreshToken() {}, close() { this.closed = true; },
      };
      conns.push(c);
      return c;
    },
  });
  herald.on("lost", (l) => seen.lost.push(l));
  herald.on("serverSubscribe", (e) => seen.serverSubscribe.push(e.topics));
  herald.on("serverMessage", (m) => seen.serverMessage.push(m.id));
  herald.on("error", (e) => seen.errors.push(e));
  return { herald, conns, seen };
}

const msg = (topic, id, data = null) => ({ topic, id, data });

// ---- validation and matching ----

test("patterns are refused as the gateway refuses them, each with its reason", async () => {
  const refused = {
    "*": /bare `\*` would match every topic/,
    "ord*": /must follow `.` or `:`/,
    "orders*": /must follow `.` or `:`/,
    "a.*.b": /stands only last/,
    "a*b": /stands only last/,
    "a.*.*": /stands only last/,
    "user:*": /personal topics/,
    "user:alice.*": /personal topics/,
    "conn:*": /personal topics/,
    "a b.*": /prefix is 1-127 characters/,
    [`${"x".repeat(127)}.*`]: /longer than 128/,
  };
  for (const [name, reason] of Object.entries(refused)) {
    assert.match(subscriptionError(name) ?? "", reason, name);
  }
  for (const ok of ["orders.*", "orders.eu.*", "chat:*", "chat:room.*", `${"x".repeat(126)}.*`, "news", "user:alice"]) {
    assert.equal(subscriptionError(ok), undefined, ok);
  }
  assert.match(subscriptionError("a/b"), /1-128 characters/);
  assert.ok(isPattern("orders.*") && isPattern("*") && !isPattern("orders"));

  const herald = new Herald("http://gw.test", { transports: ["sse"], connect: () => ({ update() {}, refreshToken() {}, close() {} }) });
  for (const [name, reason] of Object.entries(refused)) {
    assert.throws(() => herald.subscribe(name, () => {}), (e) => e instanceof TypeError && reason.test(e.message), name);
  }
  assert.throws(() => herald.subscribe("*", () => {}), /^TypeError: Herald: bad pattern "\*": a bare/);
  assert.throws(() => herald.subscribe("a.*.b", () => {}), /^TypeError: Herald: bad topic name "a\.\*\.b"/);
  assert.throws(() => herald.subscribe("orders.*", () => {}, { last: 5 }), /last does not apply to a pattern/);
  await assert.rejects(herald.publish("orders.*", 1), /bad topic name/);
  herald.close();
});

test("a pattern matches its prefix within its own namespace only", () => {
  const cases = [
    ["orders.*", "orders.eu", true],
    ["orders.*", "orders.eu.paris", true],
    ["orders.*", "orders.", true],
    ["orders.*", "orders", false],
    ["orders.*", "ordersx.eu", false],
    ["orders.*", "orders.eu:x", false],
    ["orders.*", "orders.*", false],
    ["orders.eu.*", "orders.eu.paris", true],
    ["orders.eu.*", "orders.us", false],
    ["chat:*", "chat:room1", true],
    ["chat:*", "chat:room.1:x", true],
    ["chat:*", "chat", false],
    ["chat:*", "chatx:room", false],
    ["chat:room.*", "chat:room.1", true],
    ["chat:room.*", "chat:roomx", false],
    ["orders", "orders", false],
  ];
  for (const [pattern, topic, expected] of cases) {
    assert.equal(matchesPattern(pattern, topic), expected, `${pattern} ~ ${topic}`);
  }
});

// ---- routing ----

test("a message goes to every handler whose topic or pattern matches it, once to each", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket"] });
  const got = { all: [], eu: [], exact: [], shared: [] };
  const shared = (m) => got.shared.push(m.id);
  herald.subscribe("orders.*", (m) => got.all.push(`${m.topic}/${m.id}`));
  herald.subscribe("orders.eu.*", (m) => got.eu.push(m.id));
  herald.subscribe("orders.eu.paris", (m) => got.exact.push(m.id));
  // One handler on the topic and on two patterns that match it: called once per message.
  herald.subscribe("orders.eu.paris", shared);
  herald.subscribe("orders.*", shared);
  herald.subscribe("orders.eu.*", shared);
  await flush();
  const c = conns[0];
  assert.deepEqual([...c.topicsAtStart], [["orders.*", undefined], ["orders.eu.*", undefined], ["orders.eu.paris", undefined]],
    "the patterns themselves are subscribed, once each");
  c.handlers.open();
  c.handlers.message(msg("orders.us", "a-1"));
  c.handlers.message(msg("orders.eu.paris", "b-1"));
  c.handlers.message(msg("orders.eu.paris", "b-1")); // a duplicate: not twice
  c.handlers.message(msg("orders.eu:x", "c-1")); // another namespace: no subscription
  c.handlers.message(msg("ordersx.eu", "d-1")); // not the prefix
  c.handlers.message(msg("orders.eu.lyon", "e-1"));
  assert.deepEqual(got, {
    all: ["orders.us/a-1", "orders.eu.paris/b-1", "orders.eu.lyon/e-1"],
    eu: ["b-1", "e-1"],
    exact: ["b-1"],
    shared: ["a-1", "b-1", "e-1"],
  });
  assert.deepEqual(seen.serverMessage, [], "the patterns' topics are the client's own");
  assert.equal(herald.cursor("orders.us"), "a-1");
  assert.equal(herald.cursor("orders.eu:x"), undefined);
  herald.close();
});

test("a pattern takes over a server topic it matches; maxTopics counts a pattern once", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket"], maxTopics: 2 });
  const got = [];
  herald.subscribe("room:*", (m) => got.push(m.id));
  herald.subscribe("news", () => {});
  assert.throws(() => herald.subscribe("orders.*", () => {}), RangeError);
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.serverSubscribed(["room:1", "other"]);
  assert.deepEqual(seen.serverSubscribe, [["other"]], "room:1 comes through the pattern");
  assert.deepEqual(herald.serverTopics, ["other"]);
  c.handlers.message(msg("room:1", "ab-1"));
  assert.deepEqual([got, seen.serverMessage], [["ab-1"], []]);
  herald.close();
});

// ---- cursors and resume ----

test("each topic a pattern delivered is resumed from its cursor, under the pattern, across reconnects and fallbacks", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket", "sse", "poll"], stableAfter: 5000 });
  const got = [];
  herald.subscribe("orders.*", (m) => got.push(`${m.topic}/${m.id}`));
  await flush();
  const ws = conns[0];
  assert.equal(ws.transport, "websocket");
  assert.deepEqual(ws.patternCursorsAtStart, new Map());
  ws.handlers.open();
  ws.handlers.message(msg("orders.eu", "e-1"));
  ws.handlers.message(msg("orders.us", "b-4"));
  ws.handlers.message(msg("orders.eu", "e-2"));
  t.mock.timers.tick(6000); // stable
  ws.handlers.close({ reason: "cut" });
  t.mock.timers.tick(100);
  await flush();
  const ws2 = conns[1];
  assert.equal(ws2.transport, "websocket");
  assert.deepEqual([...ws2.topicsAtStart], [["orders.*", undefined]], "the pattern, not its topics, is subscribed again");
  assert.deepEqual([...ws2.patternCursorsAtStart], [["orders.us", "b-4"], ["orders.eu", "e-2"]], "each from its last id");
  ws2.handlers.close({ reason: "refused" }); // cut at once: falls back
  t.mock.timers.tick(100);
  await flush();
  const sse = conns[2];
  assert.equal(sse.transport, "sse");
  assert.deepEqual([...sse.patternCursorsAtStart], [["orders.us", "b-4"], ["orders.eu", "e-2"]], "the same cursors on the fallback");
  // The SSE opening id names the positions of the topics the pattern resumed, and one the
  // pattern delivered meanwhile on another connection of the cluster.
  sse.handlers.position("orders.eu", "e-2");
  sse.handlers.position("orders.us", "b-4");
  sse.handlers.position("orders.asia", "c-9");
  sse.handlers.open();
  sse.handlers.message(msg("orders.eu", "e-2")); // replayed: already delivered
  sse.handlers.message(msg("orders.eu", "e-3"));
  assert.deepEqual(got, ["orders.eu/e-1", "orders.us/b-4", "orders.eu/e-2", "orders.eu/e-3"]);
  assert.equal(herald.cursor("orders.asia"), "c-9");
  sse.handlers.close({ reason: "cut" });
  t.mock.timers.tick(100);
  await flush();
  const poll = conns[3];
  assert.equal(poll.transport, "poll");
  assert.deepEqual([...poll.topicsAtStart], [["orders.*", undefined]]);
  assert.deepEqual([...poll.patternCursorsAtStart], [["orders.us", "b-4"], ["orders.asia", "c-9"], ["orders.eu", "e-3"]]);
  herald.close();
});

test("the cursors of a pattern's topics are bounded: the least recently delivered goes first", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["sse"] });
  herald.subscribe("t.*", () => {});
  herald.subscribe("t.named", () => {});
  await flush();
  const c = conns[0];
  c.handlers.open();
  assert.equal(MAX_PATTERN_TOPICS, 32);
  c.handlers.message(msg("t.named", "d-1")); // subscribed by name: not one of the pattern's
  for (let i = 0; i < 40; i++) c.handlers.message(msg(`t.${i}`, `a-${i + 1}`));
  let cursors = c.ctx.patternCursors();
  assert.equal(cursors.size, 32);
  assert.deepEqual([...cursors.keys()].slice(0, 2), ["t.8", "t.9"], "t.0 .. t.7 were forgotten");
  assert.equal(herald.cursor("t.7"), undefined);
  assert.equal(herald.cursor("t.named"), "d-1");
  assert.deepEqual([...c.ctx.topics()], [["t.*", undefined], ["t.named", "d-1"]]);
  // A forgotten topic comes back when it delivers again, and the least recent leaves.
  c.handlers.message(msg("t.3", "a-50")); // t.8 leaves
  c.handlers.message(msg("t.8", "a-51")); // t.8 comes back, t.9 leaves
  cursors = c.ctx.patternCursors();
  assert.equal(cursors.size, 32);
  assert.equal(cursors.get("t.3"), "a-50");
  assert.deepEqual([...cursors.keys()].slice(0, 1), ["t.10"]);
  assert.deepEqual([...cursors.keys()].slice(-2), ["t.3", "t.8"]);
  herald.close();
});

test("unsubscribing: a pattern's cursors go with it; a named topic a pattern matches keeps its cursor", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket"] });
  const all = herald.subscribe("orders.*", () => {});
  const eu = herald.subscribe("orders.eu.*", () => {});
  const exact = herald.subscribe("orders.fr", () => {});
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.message(msg("orders.us", "b-1"));
  c.handlers.message(msg("orders.eu.paris", "a-1"));
  c.handlers.message(msg("orders.fr", "f-1"));
  assert.deepEqual([...c.ctx.patternCursors()], [["orders.us", "b-1"], ["orders.eu.paris", "a-1"]]);
  exact.unsubscribe();
  assert.equal(herald.cursor("orders.fr"), "f-1", "orders.* still delivers it: its cursor stays");
  assert.deepEqual([...c.ctx.patternCursors().keys()], ["orders.us", "orders.eu.paris", "orders.fr"]);
  all.unsubscribe();
  assert.deepEqual([...c.ctx.patternCursors()], [["orders.eu.paris", "a-1"]], "only what orders.eu.* still matches");
  assert.equal(herald.cursor("orders.us"), undefined);
  // Subscribing a pattern's topic by name carries its cursor over.
  herald.subscribe("orders.eu.paris", () => {});
  await flush();
  assert.deepEqual([...c.ctx.topics()], [["orders.eu.*", undefined], ["orders.eu.paris", "a-1"]]);
  assert.deepEqual([...c.ctx.patternCursors()], []);
  eu.unsubscribe();
  assert.equal(herald.cursor("orders.eu.paris"), "a-1");
  c.handlers.message(msg("orders.eu.lyon", "0-1")); // nothing matches it any more
  assert.equal(herald.cursor("orders.eu.lyon"), undefined);
  herald.close();
});

test("loss signals: a pattern's topic moves its cursor; the pattern's own lag goes to its onLost", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, seen } = setup({ transports: ["websocket"] });
  const lost = [];
  const onLost = (i) => lost.push(i);
  herald.subscribe("orders.*", () => {}, { onLost });
  herald.subscribe("orders.eu", () => {}, { onLost }); // the same handler: told once
  herald.subscribe("chat:*", () => {});
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.message(msg("orders.us", "b-3"));
  c.handlers.message(msg("orders.eu", "e-3"));
  c.handlers.message(msg("chat:1", "c-3"));
  // Resumed from an expired position: the loss, then delivery from the new start.
  c.handlers.lost({ topic: "orders.us", reason: "expired" }, "b-10");
  assert.equal(herald.cursor("orders.us"), "b-10");
  c.handlers.lost({ topic: "orders.eu", reason: "expired" }, "e-10");
  c.handlers.lost({ topic: "orders.*", reason: "lagged" });
  assert.equal(herald.cursor("orders.us"), "b-10", "a pattern's lag keeps its topics' cursors");
  c.handlers.lost({ topic: "chat:*", reason: "lagged" }); // no onLost: to `lost`
  c.handlers.lost({ topic: "news.*", reason: "lagged" }); // not subscribed: dropped
  assert.deepEqual(lost, [
    { topic: "orders.us", reason: "expired" },
    { topic: "orders.eu", reason: "expired" },
    { topic: "orders.*", reason: "lagged" },
  ]);
  assert.deepEqual(seen.lost, [{ topic: "chat:*", reason: "lagged" }]);
  herald.close();
});

// ---- the real transports ----

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

test("websocket: the pattern is subscribed with the cursors of its topics, in the same frame", async () => {
  FakeSocket.all = [];
  const herald = new Herald("http://gw.test", {
    transports: ["websocket"], WebSocket: FakeSocket, random: () => 0, stableAfter: 0, openTimeout: 1000,
  });
  const got = [];
  herald.subscribe("orders.*", (m) => got.push(m.id));
  herald.subscribe("news", () => {}, { last: 3 });
  await until("a socket", () => FakeSocket.all.length === 1);
  const ws = FakeSocket.all[0];
  ws.accept();
  assert.deepEqual(ws.sent, [
    { type: "subscribe", topics: ["orders.*"], cursors: {} },
    { type: "subscribe", topics: ["news"], cursors: {}, last: 3 },
  ]);
  ws.receive({ type: "subscribed", topics: ["orders.*"], cursors: {} });
  ws.receive({ type: "subscribed", topics: ["news"], cursors: { news: "d-0" } });
  ws.receive({ type: "message", topic: "orders.eu", id: "e-41", data: 1 });
  ws.receive({ type: "message", topic: "orders.us", id: "b-2", data: 2 });
  // Another pattern on the open connection: no cursor for the topics orders.* delivers.
  ws.sent.length = 0;
  herald.subscribe("orders.eu.*", () => {});
  await flush();
  assert.deepEqual(ws.sent, [{ type: "subscribe", topics: ["orders.eu.*"], cursors: {} }]);
  ws.receive({ type: "subscribed", topics: ["orders.eu.*"], cursors: {} });
  ws.closeByServer(1006, "");
  await until("a second socket", () => FakeSocket.all.length === 2);
  const ws2 = FakeSocket.all[1];
  ws2.accept();
  assert.deepEqual(ws2.sent, [{
    type: "subscribe",
    topics: ["orders.*", "news", "orders.eu.*"],
    cursors: { news: "d-0", "orders.eu": "e-41", "orders.us": "b-2" },
  }], "the patterns with their topics' cursors, not the topics");
  ws2.receive({ type: "subscribed", topics: ["orders.*", "news", "orders.eu.*"], cursors: { news: "d-0" } });
  ws2.receive({ type: "message", topic: "orders.eu", id: "e-41", data: 1 }); // replayed: once
  ws2.receive({ type: "message", topic: "orders.eu", id: "e-42", data: 3 });
  assert.deepEqual(got, ["e-41", "b-2", "e-42"]);
  herald.close();
});

/** A fetch whose answers the test gives: `sse()` streams, `json(body)` answers a poll. */
function fakeFetch() {
  const requests = [];
  const fetch = (url, init) => {
    const u = new URL(url);
    return new Promise((resolve, reject) => {
      const req = { url: u, headers: init.headers, resolve };
      init.signal?.addEventListener("abort", () => {
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
        resolve(new Response(JSON.stringify(body), { status: 200, headers: { "content-type": "application/json" } }));
      };
      requests.push(req);
    });
  };
  return { fetch, requests };
}

test("sse: the pattern in the query, its topics in Last-Event-ID; their positions are not server topics", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", {
    transports: ["sse"], fetch, random: () => 0, stableAfter: 0, openTimeout: 2000,
  });
  const told = [];
  herald.on("serverSubscribe", (e) => told.push(e.topics));
  const got = [];
  herald.subscribe("orders.*", (m) => got.push(`${m.topic}/${m.id}`));
  await until("a request", () => requests.length === 1);
  const r1 = requests[0];
  assert.deepEqual(r1.url.searchParams.getAll("topic"), ["orders.*"]);
  assert.equal(r1.headers["last-event-id"], undefined);
  const s = r1.sse();
  s.push("retry: 3000\nid: \n\n"); // nothing delivered yet: an empty id
  s.push('id: orders.eu=e-7\ndata: {"type":"message","topic":"orders.eu","id":"e-7","data":1}\n\n');
  s.push('id: orders.eu=e-7,orders.us=b-3\ndata: {"type":"message","topic":"orders.us","id":"b-3","data":2}\n\n');
  await until("two messages", () => got.length === 2);
  assert.equal(herald.state, "open");
  s.end();
  await until("a second request", () => requests.length === 2);
  const r2 = requests[1];
  assert.deepEqual(r2.url.searchParams.getAll("topic"), ["orders.*"]);
  assert.equal(r2.headers["last-event-id"], "orders.eu=e-7,orders.us=b-3");
  const s2 = r2.sse();
  s2.push("retry: 3000\nid: orders.eu=e-7,orders.us=b-3,orders.asia=a-1\n\n");
  s2.push('id: orders.eu=e-8,orders.us=b-3,orders.asia=a-1\ndata: {"type":"message","topic":"orders.eu","id":"e-8","data":3}\n\n');
  await until("the third message", () => got.length === 3);
  assert.deepEqual(told, [], "the pattern's topics are not a connect hook's");
  assert.equal(herald.cursor("orders.asia"), "a-1");
  assert.deepEqual(got, ["orders.eu/e-7", "orders.us/b-3", "orders.eu/e-8"]);
  herald.close();
});

test("poll: the cursor sent back names the pattern's topics; they are not server topics", async () => {
  const { fetch, requests } = fakeFetch();
  const herald = new Herald("http://gw.test", { transports: ["poll"], fetch, openTimeout: 2000, pollTimeout: 1 });
  const told = [];
  herald.on("serverSubscribe", (e) => told.push(e.topics));
  const got = [];
  herald.subscribe("orders.*", (m) => got.push(`${m.topic}/${m.id}`));
  herald.subscribe("news", () => {});
  await until("a poll", () => requests.length === 1);
  assert.deepEqual(requests[0].url.searchParams.getAll("topic"), ["orders.*", "news"]);
  assert.equal(requests[0].url.searchParams.get("cursor"), null);
  requests[0].json({
    messages: [
      { type: "message", topic: "orders.eu", id: "e-1", data: 1 },
      { type: "message", topic: "orders.us", id: "b-5", data: 2 },
    ],
    lost: [], cursor: "news=d-0,orders.eu=e-1,orders.us=b-5",
  });
  await until("the next poll", () => requests.length === 2);
  assert.deepEqual(requests[1].url.searchParams.getAll("topic"), ["orders.*", "news"]);
  assert.equal(requests[1].url.searchParams.get("cursor"), "news=d-0,orders.eu=e-1,orders.us=b-5");
  requests[1].json({ messages: [{ type: "message", topic: "orders.eu", id: "e-2", data: 3 }], lost: [], cursor: "news=d-0,orders.eu=e-2,orders.us=b-5" });
  await until("the third poll", () => requests.length === 3);
  assert.equal(requests[2].url.searchParams.get("cursor"), "news=d-0,orders.us=b-5,orders.eu=e-2");
  assert.deepEqual(told, []);
  assert.deepEqual(got, ["orders.eu/e-1", "orders.us/b-5", "orders.eu/e-2"]);
  herald.close();
});
