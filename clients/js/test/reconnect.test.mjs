// The client's reconnect, fallback and cursor logic against scripted fake transports, on
// mocked timers (no network, no real waiting).
import { test, mock } from "node:test";
import assert from "node:assert/strict";
import { Herald, HeraldError } from "../dist/herald.js";

/** A Herald whose connections are fakes the test drives. */
function setup(options = {}) {
  const conns = [];
  const states = [];
  const transports = [];
  const errors = [];
  const herald = new Herald(options.urls ?? "http://gw.test", {
    random: () => 0.5,
    backoff: { base: 400, max: 10000 },
    upgradeInterval: 30000,
    stableAfter: 5000,
    ...options,
    connect: (transport, ctx, handlers) => {
      const c = {
        transport, ctx, handlers, closed: false, updates: 0,
        topicsAtStart: new Map(ctx.topics()),
        update() { this.updates++; },
        refreshToken() {},
        close() { this.closed = true; },
      };
      conns.push(c);
      return c;
    },
  });
  herald.on("state", (s) => states.push(s));
  herald.on("transport", (t) => transports.push(t));
  herald.on("error", (e) => errors.push(e));
  return { herald, conns, states, transports, errors };
}

function msg(topic, id, data) {
  return { topic, id, data };
}

async function flush() {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}

test("falls back websocket → sse → poll when each cannot connect, then opens", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, states, transports } = setup();
  herald.subscribe("news", () => {});
  await flush();
  assert.equal(conns.length, 1);
  assert.equal(conns[0].transport, "websocket");
  conns[0].handlers.close({ reason: "refused" });
  assert.equal(herald.state, "connecting", "not open yet: still connecting");
  t.mock.timers.tick(10000);
  await flush();
  assert.equal(conns[1].transport, "sse");
  conns[1].handlers.close({ reason: "cut at once" });
  t.mock.timers.tick(10000);
  await flush();
  assert.equal(conns[2].transport, "poll");
  conns[2].handlers.open();
  assert.equal(herald.state, "open");
  assert.equal(herald.transport, "poll");
  assert.deepEqual(transports, ["poll"]);
  assert.deepEqual(states, ["open"]);
  herald.close();
  assert.equal(herald.state, "closed");
});

test("every message once and in order across reconnects; resumes with the cursor", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["sse"] });
  const got = [];
  herald.subscribe("a", (m) => got.push(m.data));
  await flush();
  const c1 = conns[0];
  c1.handlers.position("a", "e1-0");
  c1.handlers.open();
  c1.handlers.message(msg("a", "e1-1", 1));
  c1.handlers.message(msg("a", "e1-2", 2));
  t.mock.timers.tick(6000); // stable
  c1.handlers.close({ reason: "stream ended", retryMs: 1500 });
  t.mock.timers.tick(1499);
  await flush();
  assert.equal(conns.length, 1, "the server's retry: is honoured");
  t.mock.timers.tick(1);
  await flush();
  const c2 = conns[1];
  assert.equal(c2.transport, "sse", "a cut after a stable period stays on the transport");
  assert.deepEqual([...c2.topicsAtStart], [["a", "e1-2"]], "resumes after the last id delivered");
  c2.handlers.position("a", "e1-1"); // an older position does not move the cursor back
  c2.handlers.open();
  c2.handlers.message(msg("a", "e1-2", 2)); // a replayed duplicate
  c2.handlers.message(msg("a", "e1-3", 3));
  c1.handlers.message(msg("a", "e1-4", "late")); // a closed connection's report is ignored
  assert.deepEqual(got, [1, 2, 3]);
  assert.equal(herald.cursor("a"), "e1-3");
  herald.close();
});

test("starting positions let a client that received nothing resume exactly", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket"] });
  herald.subscribe("a", () => {});
  await flush();
  conns[0].handlers.position("a", "e1-5");
  conns[0].handlers.open();
  conns[0].handlers.close({ reason: "gone" });
  t.mock.timers.tick(10000);
  await flush();
  assert.deepEqual([...conns[1].topicsAtStart], [["a", "e1-5"]]);
  herald.close();
});

test("a loss signal reaches onLost and delivery goes on from the new epoch", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket"] });
  const got = [];
  const lost = [];
  herald.subscribe("a", (m) => got.push(m.id), { onLost: (i) => lost.push(i) });
  await flush();
  const c = conns[0];
  c.handlers.open();
  c.handlers.message(msg("a", "e1-7", 7));
  // The node restarted: its `subscribed` names a position in another epoch, then the loss.
  c.handlers.position("a", "e2-3");
  assert.equal(herald.cursor("a"), "e1-7");
  c.handlers.lost({ topic: "a", reason: "epoch" });
  assert.deepEqual(lost, [{ topic: "a", reason: "epoch" }]);
  assert.equal(herald.cursor("a"), "e2-3");
  c.handlers.message(msg("a", "e2-4", 4));
  assert.deepEqual(got, ["e1-7", "e2-4"]);
  herald.close();
});

test("a 4xx refusal is final: closed, with the reason, and no retry loop", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, errors } = setup({ transports: ["sse", "poll"] });
  herald.subscribe("user:bob", () => {});
  await flush();
  conns[0].handlers.close({ reason: "sse: 403", fatal: new HeraldError(403, "forbidden", 'not allowed on topic "user:bob"') });
  assert.equal(herald.state, "closed");
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "forbidden");
  assert.match(errors[0].message, /not allowed on topic/);
  t.mock.timers.tick(120000);
  await flush();
  assert.equal(conns.length, 1, "no further attempt");
});

test("an invalid token is refreshed once, then the refusal is final", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  let calls = 0;
  const { herald, conns, errors } = setup({ transports: ["sse"], token: async () => `t${++calls}` });
  herald.subscribe("a", () => {});
  await flush();
  await flush();
  assert.equal(conns[0].ctx.token(), "t1");
  conns[0].handlers.close({ reason: "401", fatal: new HeraldError(401, "invalid_token", "expired") });
  t.mock.timers.tick(0);
  await flush();
  await flush();
  assert.equal(conns.length, 2);
  assert.equal(conns[1].ctx.token(), "t2", "a fresh token");
  conns[1].handlers.close({ reason: "401", fatal: new HeraldError(401, "invalid_token", "still bad") });
  assert.equal(herald.state, "closed");
  assert.equal(errors.at(-1).reason, "still bad");
});

test("a drain's retry hint is honoured on the same transport; the backoff grows with failures", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket", "sse"], random: () => 0.999 });
  herald.subscribe("a", () => {});
  await flush();
  conns[0].handlers.open();
  conns[0].handlers.close({ reason: "1012", shutdown: true, retryMs: 2500 });
  t.mock.timers.tick(2499);
  await flush();
  assert.equal(conns.length, 1);
  t.mock.timers.tick(1);
  await flush();
  assert.equal(conns[1].transport, "websocket", "a drain is not the transport's fault");
  // Refused while the node restarts: delays grow (full jitter bounds 400, 800, 1600, ...).
  const delays = [];
  for (let i = 1; i <= 4; i++) {
    const before = conns.length;
    conns[i].handlers.close({ reason: "refused" });
    let waited = 0;
    while (conns.length === before) {
      t.mock.timers.tick(10);
      waited += 10;
      await flush();
    }
    delays.push(waited);
  }
  assert.ok(delays[0] <= 410 && delays[1] > 700 && delays[2] > 1500 && delays[3] > 3100, JSON.stringify(delays));
  herald.close();
});

test("several URLs: a failed node is left for the next before the transport changes", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ urls: ["http://a.test", "http://b.test", "http://c.test"] });
  herald.subscribe("a", () => {});
  await flush();
  assert.equal(conns[0].ctx.url, "http://a.test/");
  conns[0].handlers.open();
  t.mock.timers.tick(6000);
  conns[0].handlers.close({ reason: "node died" });
  t.mock.timers.tick(10000);
  await flush();
  assert.equal(conns[1].ctx.url, "http://a.test/", "a stable connection's node is tried again first");
  conns[1].handlers.close({ reason: "refused" });
  t.mock.timers.tick(10000);
  await flush();
  assert.deepEqual([conns[2].ctx.url, conns[2].transport], ["http://b.test/", "websocket"]);
  conns[2].handlers.open();
  assert.equal(herald.state, "open");
  herald.close();
});

test("on a fallback, the preferred transport is tried again and taken back when it opens", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns, transports } = setup({ transports: ["websocket", "sse", "poll"], upgradeInterval: 30000 });
  const got = [];
  herald.subscribe("a", (m) => got.push(m.id));
  await flush();
  conns[0].handlers.close({ reason: "upgrade refused" });
  t.mock.timers.tick(10000);
  await flush();
  conns[1].handlers.close({ reason: "sse cut" });
  t.mock.timers.tick(10000);
  await flush();
  const poll = conns[2];
  poll.handlers.open();
  poll.handlers.message(msg("a", "e1-1", 1));
  t.mock.timers.tick(30000);
  await flush();
  const ws = conns[3];
  assert.equal(ws.transport, "websocket", "the most preferred first");
  assert.deepEqual([...ws.topicsAtStart], [["a", "e1-1"]]);
  ws.handlers.close({ reason: "still refused" });
  await flush();
  const sse = conns[4];
  assert.equal(sse.transport, "sse", "then the next preferred, in the same round");
  sse.handlers.close({ reason: "still cut" });
  assert.equal(herald.transport, "poll");
  poll.handlers.message(msg("a", "e1-2", 2));
  t.mock.timers.tick(30000);
  await flush();
  const ws2 = conns[5];
  assert.equal(ws2.transport, "websocket");
  poll.handlers.message(msg("a", "e1-3", 3)); // still delivering while the probe subscribes
  ws2.handlers.message(msg("a", "e1-3", 3)); // the probe's replay: not twice
  ws2.handlers.open();
  assert.ok(poll.closed, "the fallback is closed once the preferred one is open");
  assert.equal(herald.transport, "websocket");
  assert.deepEqual(transports, ["poll", "websocket"]);
  ws2.handlers.message(msg("a", "e1-4", 4));
  assert.deepEqual(got, ["e1-1", "e1-2", "e1-3", "e1-4"]);
  herald.close();
});

test("subscriptions share one connection; the last unsubscribe drops the topic and its cursor", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { herald, conns } = setup({ transports: ["websocket"] });
  const a1 = [];
  const a2 = [];
  const s1 = herald.subscribe("a", (m) => a1.push(m.id));
  const s2 = herald.subscribe("a", (m) => a2.push(m.id));
  herald.subscribe("b", () => {});
  await flush();
  assert.equal(conns.length, 1);
  assert.deepEqual([...conns[0].topicsAtStart.keys()], ["a", "b"]);
  conns[0].handlers.open();
  conns[0].handlers.message(msg("a", "e-1", 1));
  s1.unsubscribe();
  conns[0].handlers.message(msg("a", "e-2", 2));
  assert.deepEqual([a1, a2], [["e-1"], ["e-1", "e-2"]]);
  s2.unsubscribe();
  await flush();
  assert.deepEqual([...conns[0].ctx.topics().keys()], ["b"]);
  assert.equal(conns[0].updates, 1, "one update for the change");
  assert.equal(herald.cursor("a"), undefined);
  assert.throws(() => herald.subscribe("bad topic", () => {}), /bad topic name/);
  herald.close();
});

test("subscriptions made while the first token is fetched open one connection", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  let release;
  const { herald, conns } = setup({ transports: ["sse"], token: () => new Promise((r) => { release = r; }) });
  herald.subscribe("a", () => {});
  await flush();
  herald.subscribe("b", () => {});
  await flush();
  assert.equal(conns.length, 0, "waiting for the token");
  release("tok");
  await flush();
  await flush();
  assert.equal(conns.length, 1);
  assert.deepEqual([...conns[0].topicsAtStart.keys()], ["a", "b"]);
  assert.equal(conns[0].ctx.token(), "tok");
  herald.close();
});
