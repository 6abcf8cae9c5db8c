// heraldpush (clients/js/dist) in headless Chromium against real `herald` processes:
// every message arrives once and in order, and the state events and `transport` follow, when
//  (c) WebSocket upgrades are refused by a proxy in front of Herald → SSE,
//  (d) SSE is cut off as well → long-poll, and back to WebSocket when both are allowed again,
//      then (d') SSE buffered by the proxy → long-poll again after openTimeout;
//  (a) the node drains and restarts (a Redis cluster, so positions survive it);
//  (b) a node of a 3-node Redis cluster is killed and the client moves to another node;
//  (e) SSE from another origin with credentials, resuming through CORS preflights;
//  (f) tokens that expire every few seconds are refreshed without a cut, publishing over the
//      WebSocket follows the token's claim, and a refused subscription closes with the reason;
//  (g) the same module under Node (no browser, no global WebSocket on Node 20): SSE through
//      fetch, publishing with an API key.
// Usage: HERALD_BIN=... HERALD_CLIENT_DIST=... HERALD_TEST_REDIS_URL=... node client.mjs
// (exit code 0 = pass; prints the reason otherwise)
import { createHmac } from "node:crypto";
import { Node, Proxy, assert, until, launchChromium } from "./harness.mjs";

const dist = process.env.HERALD_CLIENT_DIST;
const redis = process.env.HERALD_TEST_REDIS_URL;
assert(process.env.HERALD_BIN && dist && redis, "HERALD_BIN, HERALD_CLIENT_DIST and HERALD_TEST_REDIS_URL must be set");
const prefix = `browser-client-${process.pid}-${Date.now().toString(36)}`;

// Short intervals, so that a run takes seconds; the logic is the one of the defaults.
const OPTIONS = { upgradeInterval: 1500, backoff: { base: 200, max: 1500 }, openTimeout: 3000, stableAfter: 1000 };

const nodes = [];
const proxies = [];
const browser = await launchChromium();

/** A page of `proxy` running a Herald client on `urls`, subscribed to topic `t`. */
async function openClient(proxy, urls, extra = {}, setup = async () => {}, topic = "t") {
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.error("page error:", e));
  await setup(page);
  await page.goto(`${proxy.url}/__client/page.html`);
  await page.evaluate(async ({ urls, options, topic }) => {
    const { Herald } = await import("/__client/herald.js");
    Object.assign(window, { got: [], ids: [], states: [], transports: [], lost: [], errors: [] });
    if (options.tokenFromTest) options.token = () => window.mintToken();
    const h = new Herald(urls, options);
    h.on("state", (s) => window.states.push(s));
    h.on("transport", (t) => window.transports.push(t));
    h.on("error", (e) => window.errors.push(e.message));
    h.subscribe(topic, (m) => { window.got.push(m.data); window.ids.push(m.id); }, { onLost: (i) => window.lost.push(i) });
    window.herald = h;
  }, { urls, options: { ...OPTIONS, ...extra }, topic });
  const client = {
    page,
    state: () => page.evaluate(() => ({
      got: window.got, ids: window.ids, states: window.states, transports: window.transports,
      lost: window.lost, errors: window.errors, transport: window.herald.transport, now: window.herald.state,
    })),
    async waitFor(what, pred, ms = 20000) {
      await until(what, async () => pred(await client.state()), ms).catch(async (e) => {
        throw new Error(`${e.message}; client: ${JSON.stringify(await client.state())}`);
      });
    },
    publish: (data, to = topic) => page.evaluate(([d, t]) => window.herald.publish(t, d).then((r) => r.id,
      (e) => `refused: ${e.code} ${e.reason}`), [data, to]),
  };
  return client;
}

function expectExactly(s, n, what) {
  const want = Array.from({ length: n }, (_, i) => i + 1);
  assert(JSON.stringify(s.got) === JSON.stringify(want), `${what}: expected 1..${n} once and in order, got ${JSON.stringify(s.got)}`);
  assert(s.lost.length === 0, `${what}: unexpected loss ${JSON.stringify(s.lost)}`);
  assert(new Set(s.ids).size === s.ids.length, `${what}: an id twice: ${JSON.stringify(s.ids)}`);
}

try {
  // (c) and (d): one node behind the test proxy; dev mode so the client may publish.
  {
    const node = await Node.start({ id: "p1", dev: true });
    nodes.push(node);
    const proxy = await Proxy.start({ target: node.public, dist });
    proxies.push(proxy);
    const c = await openClient(proxy, proxy.url);
    await c.waitFor("websocket open", (s) => s.now === "open" && s.transport === "websocket");
    for (const n of [1, 2, 3]) await node.publish("t", n);
    await c.waitFor("1..3", (s) => s.got.length >= 3);

    // (c) The proxy starts refusing WebSocket upgrades and drops the open one.
    proxy.ws = "refuse";
    proxy.cutOpen("ws");
    for (const n of [4, 5, 6]) await node.publish("t", n);
    await c.waitFor("the fall back to SSE", (s) => s.transport === "sse" && s.now === "open");
    // It keeps trying WebSocket again (every upgradeInterval), and the proxy keeps refusing.
    await until("a WebSocket retry refused by the proxy", () => proxy.refused.ws >= 1);
    await node.publish("t", 7);
    await c.waitFor("1..7", (s) => s.got.length >= 7);
    let s = await c.state();
    expectExactly(s, 7, "after WebSocket → SSE");
    assert(s.states.includes("reconnecting"), `states ${JSON.stringify(s.states)}`);
    console.log(`(c) upgrades refused → SSE: ${JSON.stringify(s.got)}, states ${JSON.stringify(s.states)}`);

    // (d) SSE is cut off as well: streams end at once, as through a buffering proxy that gives up.
    proxy.sse = "cut";
    proxy.cutOpen("sse");
    for (const n of [8, 9, 10]) await node.publish("t", n);
    await c.waitFor("the fall back to long-poll", (s) => s.transport === "poll" && s.now === "open");
    await until("an SSE retry cut by the proxy", () => proxy.refused.sse >= 1);
    await node.publish("t", 11);
    const viaHttp = await c.publish(12); // the client publishes over HTTP while polling
    assert(/^[0-9a-f]+-\d+$/.test(viaHttp), `publish id ${viaHttp}`);
    await c.waitFor("1..12", (s) => s.got.length >= 12);
    expectExactly(await c.state(), 12, "after SSE → poll");
    console.log("(d) SSE cut too → long-poll: 8..12 received once, in order");

    // Both allowed again: the client takes WebSocket back by itself.
    proxy.ws = "allow";
    proxy.sse = "allow";
    await c.waitFor("WebSocket again", (s) => s.transport === "websocket" && s.now === "open", 15000);
    const viaWs = await c.publish(13); // over the WebSocket now
    assert(/^[0-9a-f]+-\d+$/.test(viaWs), `publish id ${viaWs}`);
    await node.publish("t", 14);
    await c.waitFor("1..14", (s) => s.got.length >= 14);
    s = await c.state();
    expectExactly(s, 14, "back on WebSocket");
    assert(JSON.stringify(s.transports) === JSON.stringify(["websocket", "sse", "poll", "websocket"]),
      `transport events ${JSON.stringify(s.transports)}`);
    assert(s.states[0] === "open" && s.states.at(-1) === "open", `states ${JSON.stringify(s.states)}`);
    console.log(`(c+d) back to WebSocket: transports ${JSON.stringify(s.transports)}, 14 messages once, in order`);

    // (d') Upgrades refused again and SSE buffered (the stream starts, nothing comes): the
    // client gives SSE up after openTimeout and polls.
    proxy.ws = "refuse";
    proxy.sse = "buffer";
    proxy.cutOpen("ws");
    for (const n of [15, 16]) await node.publish("t", n);
    await c.waitFor("long-poll past a buffering proxy", (s) => s.transport === "poll" && s.now === "open");
    await node.publish("t", 17);
    await c.waitFor("1..17", (s) => s.got.length >= 17);
    s = await c.state();
    expectExactly(s, 17, "past a buffering proxy");
    assert(s.errors.some((e) => /no opening block/.test(e)), `errors ${JSON.stringify(s.errors)}`);
    console.log(`(d') SSE buffered by the proxy → long-poll after openTimeout: 1..17 once, in order`);
    await c.page.close();
  }

  // (a) A drain and restart. Two nodes share Redis; the client knows node A only and talks to
  // it cross-origin (CORS preflight for the SSE resume header); publishes go through B.
  {
    const a = await Node.start({ id: "a", redis, prefix: `${prefix}-a` });
    const b = await Node.start({ id: "b", redis, prefix: `${prefix}-a` });
    nodes.push(a, b);
    const pages = await Proxy.start({ dist });
    proxies.push(pages);
    const c = await openClient(pages, a.public);
    await c.waitFor("open on A", (s) => s.now === "open" && s.transport === "websocket");
    for (const n of [1, 2]) await b.publish("t", n);
    await c.waitFor("1..2", (s) => s.got.length >= 2);
    const exit = await a.drain();
    assert(exit.code === 0, `A exited with ${JSON.stringify(exit)}`);
    await c.waitFor("reconnecting", (s) => s.now !== "open");
    for (const n of [3, 4]) await b.publish("t", n);
    await a.restart();
    await b.publish("t", 5);
    await c.waitFor("1..5 after the restart", (s) => s.got.length >= 5);
    await c.waitFor("WebSocket after the restart", (s) => s.transport === "websocket" && s.now === "open");
    await b.publish("t", 6);
    await c.waitFor("1..6", (s) => s.got.length >= 6);
    const s = await c.state();
    expectExactly(s, 6, "drain and restart");
    assert(s.states.includes("reconnecting"), `states ${JSON.stringify(s.states)}`);
    console.log(`(a) drain + restart: ${JSON.stringify(s.got)}, states ${JSON.stringify(s.states)}, transports ${JSON.stringify(s.transports)}`);
    await c.page.close();
  }

  // (b) Three nodes; the client is given all three and is on the first when it is killed.
  {
    const cluster = [];
    for (const id of ["k1", "k2", "k3"]) cluster.push(await Node.start({ id, redis, prefix: `${prefix}-b` }));
    nodes.push(...cluster);
    const [k1, k2, k3] = cluster;
    const pages = await Proxy.start({ dist });
    proxies.push(pages);
    const c = await openClient(pages, cluster.map((n) => n.public));
    await c.waitFor("open", (s) => s.now === "open");
    const subscribers = async (node) => (await (await fetch(`${node.admin}/v1/topics/t`)).json()).subscribers;
    await until("the client on k1", async () => (await subscribers(k1)) === 1);
    for (const n of [1, 2]) await k3.publish("t", n);
    await c.waitFor("1..2", (s) => s.got.length >= 2);
    await k1.kill();
    for (const n of [3, 4]) await k3.publish("t", n);
    await c.waitFor("1..4 on another node", (s) => s.got.length >= 4);
    await until("the client on k2", async () => (await subscribers(k2)) === 1);
    await k3.publish("t", 5);
    await c.waitFor("1..5", (s) => s.got.length >= 5);
    const s = await c.state();
    expectExactly(s, 5, "node killed");
    console.log(`(b) node killed, client moved to k2: ${JSON.stringify(s.got)}, states ${JSON.stringify(s.states)}`);
    await c.page.close();
  }

  // (e) SSE from another origin with credentials: the gateway allows the page's origin and
  // cookies; streams end every ~second (sse.max_lifetime), and every reconnect sends the
  // resume list in Last-Event-ID, a header that needs a CORS preflight.
  {
    const pages = await Proxy.start({ dist });
    proxies.push(pages);
    const node = await Node.start({
      id: "cors",
      extraToml: `max_lifetime = "1s"\n[auth]\nallowed_origins = ["${pages.url}"]\ncors_credentials = true\n`,
    });
    nodes.push(node);
    const c = await openClient(pages, node.public, { transports: ["sse"], credentials: "include", stableAfter: 200 });
    await c.waitFor("SSE open cross-origin", (s) => s.now === "open" && s.transport === "sse");
    let n = 0;
    let reconnects = 0;
    while (reconnects < 2) {
      await node.publish("t", ++n);
      await c.waitFor(`message ${n}`, (s) => s.got.length >= n);
      reconnects = (await c.state()).states.filter((x) => x === "reconnecting").length;
    }
    await node.publish("t", ++n);
    await c.waitFor(`1..${n}`, (s) => s.got.length >= n);
    const s = await c.state();
    expectExactly(s, n, "SSE cross-origin");
    assert(s.errors.every((e) => !/403|origin/.test(e)), `errors ${JSON.stringify(s.errors)}`);
    console.log(`(e) SSE cross-origin with credentials, ${reconnects} resumes with Last-Event-ID: 1..${n} once, in order`);
    await c.page.close();
  }

  // (f) Tokens: HS256, valid for 6 s, refreshed 4 s before they expire (every ~2 s).
  {
    const secret = "browser-test-secret-of-at-least-32-bytes";
    const node = await Node.start({ id: "jwt", extraToml: `[auth]\nhs256_secret = "${secret}"\n` });
    nodes.push(node);
    const pages = await Proxy.start({ dist });
    proxies.push(pages);
    let minted = 0;
    const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const mint = () => {
      minted++;
      const head = b64({ alg: "HS256", typ: "JWT" });
      const body = b64({ sub: "alice", exp: Math.floor(Date.now() / 1000) + 6, topics: ["private.*"], publish: ["private.t"] });
      const sig = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
      return `${head}.${body}.${sig}`;
    };
    for (const transports of [["websocket"], ["sse"]]) {
      minted = 0;
      const c = await openClient(pages, node.public, { transports, tokenFromTest: true, tokenRefreshMargin: 4000 },
        (page) => page.exposeFunction("mintToken", mint), "private.t");
      await c.waitFor(`${transports[0]} open with a token`, (s) => s.now === "open");
      let n = 0;
      const started = Date.now();
      // Longer than a token's life and its leeway: without refreshes the gateway would cut.
      while (Date.now() - started < 13000) {
        await node.publish("private.t", ++n);
        await c.waitFor(`message ${n}`, (s) => s.got.length >= n);
        await new Promise((r) => setTimeout(r, 250)); // a steady publisher, not a wait for readiness
      }
      const s = await c.state();
      expectExactly(s, n, `tokens refreshed on ${transports[0]}`);
      assert(!s.states.includes("reconnecting"), `${transports[0]}: the connection was cut: ${JSON.stringify(s.states)} ${JSON.stringify(s.errors)}`);
      assert(minted >= 5, `only ${minted} tokens minted in 13 s`);
      if (transports[0] === "websocket") {
        const id = await c.publish("over ws");
        assert(/^[0-9a-f]+-\d+$/.test(id), `publish over the WebSocket: ${id}`);
        await c.waitFor("own message", (s) => s.got.at(-1) === "over ws");
        const refused = await c.publish("nope", "private.other");
        assert(refused.startsWith("refused: forbidden"), `publish outside the claim: ${refused}`);
      }
      console.log(`(f) ${transports[0]}: ${minted} tokens of 6 s over 13 s, no cut, ${n} messages once, in order`);
      await c.page.close();
    }

    // A topic the client may not read: refused with the reason (an HTTP 403, or a WebSocket
    // error frame), closed, not retried.
    for (const transports of [["sse", "poll"], ["websocket"]]) {
      const c = await openClient(pages, node.public, { transports }, async () => {}, "user:bob");
      await c.waitFor("closed", (s) => s.now === "closed");
      const s = await c.state();
      assert(/forbidden/.test(s.errors.at(-1)) && /user:bob/.test(s.errors.at(-1)), `errors ${JSON.stringify(s.errors)}`);
      assert(s.errors.length === 1, `one attempt, no retry loop: ${JSON.stringify(s.errors)}`);
      console.log(`(f) a forbidden topic on ${transports[0]}: closed with "${s.errors.at(-1)}"`);
      await c.page.close();
    }
  }

  // (g) Under Node: this very process imports the built client.
  {
    const node = await Node.start({ id: "node-client", extraToml: `[auth]\napi_keys = ["node-key"]\n` });
    nodes.push(node);
    const { Herald } = await import(new URL(`file://${dist}/herald.js`));
    const got = [];
    const transports = [];
    const herald = new Herald(node.public, { ...OPTIONS, apiKey: "node-key" });
    herald.on("transport", (t) => transports.push(t));
    herald.subscribe("t", (m) => got.push(m.data));
    await until("open under Node", () => herald.state === "open");
    const expected = globalThis.WebSocket ? "websocket" : "sse";
    assert(herald.transport === expected, `under Node ${process.version}: ${herald.transport}, expected ${expected}`);
    for (const n of [1, 2]) await herald.publish("t", n);
    await node.publish("t", 3);
    await until("1..3 under Node", () => got.length >= 3);
    assert(JSON.stringify(got) === "[1,2,3]", `under Node got ${JSON.stringify(got)}`);
    herald.close();
    assert(herald.state === "closed", herald.state);
    console.log(`(g) Node ${process.version}: on ${herald.transport}, published with an API key, got ${JSON.stringify(got)}`);
  }
} finally {
  await browser.close();
  for (const p of proxies) p.close();
  for (const n of nodes) n.stop();
}
