// Drives headless Chromium (Debian's package) against a running Herald gateway:
//  1. the demo page as a person uses it: it opens with heraldpush (the client library, served by
//     the gateway at /herald-client.js), SSE and WebSocket connected to the topic in its field,
//     nothing clicked, and a published message arrives in all three lists; a new topic and
//     Enter move every pane to it (nothing more arrives from the first); Disconnect and Connect
//     work pane by pane; then the browser's native WebSocket negotiates permessage-deflate and
//     a large message and a large ping go through it compressed;
//  2. the browser's native EventSource: messages arrive; when the stream ends (sse.max_lifetime)
//     the browser reconnects by itself with Last-Event-ID and gets exactly the messages published
//     while it was away, then live ones.
//  3. over TLS (optional arguments): the page loads over HTTP/2 and an EventSource on it receives
//     a published message (SSE over HTTP/2 through a real browser);
//  4. with HERALD_USER_TOKEN (a token of user `browser-user`): heraldpush holding it is
//     disconnected by the admin API with "reconnect": false, and stays closed, telling why.
// Usage: node browser.mjs PUBLIC_URL ADMIN_URL [TLS_PUBLIC_URL TLS_ADMIN_URL]
// (exit code 0 = pass; prints the reason otherwise)
import { chromium } from "playwright-core";

const [base, admin, tlsBase, tlsAdmin] = process.argv.slice(2);
const executablePath = process.env.HERALD_CHROMIUM || "/usr/bin/chromium";

async function publish(topic, data, adminUrl = admin) {
  const res = await fetch(`${adminUrl}/v1/publish`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ topic, data }),
  });
  if (!res.ok) throw new Error(`publish answered ${res.status}: ${await res.text()}`);
  return (await res.json()).id;
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  // 1. The demo page, as a person uses it: opened, nothing clicked, every pane connects to the
  // topic in the field.
  const demo = await browser.newPage();
  const panes = ["client", "sse", "ws"];
  const status = () => demo.evaluate((ids) => ids.map((p) => document.getElementById(`${p}-status`).textContent), panes);
  // Every pane open on `topic` (the raw WebSocket's only once the gateway said "subscribed").
  const open = async (topic) => {
    try {
      await demo.waitForFunction((t) =>
        document.getElementById("client-status").textContent === `open (websocket) · ${t}` &&
        document.getElementById("sse-status").textContent === `open · ${t}` &&
        document.getElementById("ws-status").textContent === `open · ${t}`, topic, { timeout: 10000 });
    } catch (e) {
      throw new Error(`panes not open on ${topic}: ${JSON.stringify(await status())}: ${e.message}`);
    }
  };
  // `text` shown in every pane's list.
  const arrived = async (text) => {
    try {
      await demo.waitForFunction((x) =>
        ["client-log", "sse-log", "ws-log"].every((id) => document.getElementById(id).textContent.includes(x)),
        text, { timeout: 10000 });
    } catch (e) {
      throw new Error(`"${text}" not in every pane: ${JSON.stringify(await status())}: ${e.message}`);
    }
  };
  await demo.goto(`${base}/`);
  const first = await demo.inputValue("#topic");
  assert(first === "demo", `the page opens on topic ${first}`);
  await open("demo");
  await publish("demo", { text: "hello on load" });
  await arrived("hello on load");
  console.log("demo page: heraldpush, SSE and WebSocket connect as the page opens and show a published message");

  // Another topic, then Enter: every pane moves to it and hears nothing more of the first.
  await demo.fill("#topic", "demo-page");
  await demo.press("#topic", "Enter");
  await open("demo-page");
  await publish("demo", { text: "left behind" });
  await publish("demo-page", { text: "hello from the test" });
  await arrived("hello from the test");
  await new Promise((r) => setTimeout(r, 300));
  const stale = await demo.evaluate(() => ["client-log", "sse-log", "ws-log"]
    .filter((id) => document.getElementById(id).textContent.includes("left behind")));
  assert(stale.length === 0, `still on the first topic: ${stale}`);

  // Disconnect and Connect, pane by pane.
  for (const p of panes) await demo.click(`#${p}-close`);
  await new Promise((r) => setTimeout(r, 200));
  const closed = await status();
  assert(closed.every((s) => s === "closed"), `after Disconnect: ${JSON.stringify(closed)}`);
  for (const p of panes) await demo.click(`#${p}-open`);
  await open("demo-page");
  await publish("demo-page", { text: "after Connect" });
  await arrived("after Connect");
  await demo.screenshot({ path: process.env.HERALD_SCREENSHOT || "/tmp/herald-demo.png" });
  console.log("demo page: Enter on a new topic moves every pane to it; Disconnect and Connect work pane by pane");

  // 1b. Chromium's own WebSocket negotiates permessage-deflate: a large message arrives
  // whole, and a large ping the browser compresses is inflated and echoed.
  const big = Array.from({ length: 600 }, (_, i) => ({ id: i, name: "sensor", state: "ok" }));
  await demo.evaluate(() => new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://${location.host}/v1/ws`);
    window.deflateWs = ws;
    window.deflateGot = [];
    ws.onmessage = (e) => window.deflateGot.push(JSON.parse(e.data));
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: "subscribe", topics: ["browser-deflate"] }));
      resolve();
    };
    ws.onerror = () => reject(new Error("websocket failed"));
  }));
  await demo.waitForFunction(() => window.deflateGot.some((f) => f.type === "subscribed"));
  await publish("browser-deflate", big);
  await demo.evaluate((n) => window.deflateWs.send(JSON.stringify({ type: "ping", data: "x".repeat(n) })), 20000);
  await demo.waitForFunction(() =>
    window.deflateGot.some((f) => f.type === "message") && window.deflateGot.some((f) => f.type === "pong"),
    null, { timeout: 10000 });
  const deflated = await demo.evaluate(() => ({
    extensions: window.deflateWs.extensions,
    message: window.deflateGot.find((f) => f.type === "message").data,
    pong: window.deflateGot.find((f) => f.type === "pong").data.length,
  }));
  assert(deflated.extensions === "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
    `extensions ${deflated.extensions}`);
  assert(JSON.stringify(deflated.message) === JSON.stringify(big), "the large message arrived whole");
  assert(deflated.pong === 20000, `pong of ${deflated.pong} characters`);
  console.log(`native WebSocket: ${deflated.extensions}; ${JSON.stringify(big).length} B message and a 20 kB ping both ways`);

  // 2. Native EventSource with an automatic reconnect.
  const page = await browser.newPage();
  await page.goto(`${base}/`);
  await page.evaluate(() => {
    window.got = [];
    window.opens = 0;
    window.errors = 0;
    window.lost = [];
    const es = new EventSource("/v1/sse?topic=browser");
    es.onopen = () => { window.opens++; };
    es.onerror = () => { window.errors++; };
    es.onmessage = (e) => { window.got.push({ data: e.data, id: e.lastEventId }); };
    es.addEventListener("herald.lost", (e) => window.lost.push(e.data));
  });
  await page.waitForFunction(() => window.opens >= 1);
  for (const n of [1, 2, 3]) await publish("browser", n);
  await page.waitForFunction(() => window.got.length >= 3, null, { timeout: 10000 });

  // The server ends the stream after its lifetime; publish while the browser waits to reconnect.
  await page.waitForFunction(() => window.errors >= 1, null, { timeout: 15000 });
  const opensAtDrop = await page.evaluate(() => window.opens);
  for (const n of [4, 5, 6]) await publish("browser", n);
  await page.waitForFunction((o) => window.opens > o, opensAtDrop, { timeout: 15000 });
  await publish("browser", 7);
  await page.waitForFunction(() => window.got.length >= 7, null, { timeout: 10000 });
  await new Promise((r) => setTimeout(r, 300));
  const got = await page.evaluate(() => window.got);
  const lost = await page.evaluate(() => window.lost);
  const data = got.map((m) => Number(m.data));
  assert(JSON.stringify(data) === JSON.stringify([1, 2, 3, 4, 5, 6, 7]),
    `expected 1..7 exactly once in order, got ${JSON.stringify(data)}`);
  assert(lost.length === 0, `unexpected loss signal ${JSON.stringify(lost)}`);
  assert(got.every((m) => m.id.startsWith("browser=")), `ids ${JSON.stringify(got.map((m) => m.id))}`);
  console.log(`EventSource: reconnected by itself and resumed exactly: ${JSON.stringify(data)}`);

  // 3. SSE over HTTP/2 (TLS with the test certificate, which this browser does not trust).
  if (tlsBase) {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const secure = await context.newPage();
    await secure.goto(`${tlsBase}/`);
    const protocol = await secure.evaluate(() => performance.getEntriesByType("navigation")[0].nextHopProtocol);
    assert(protocol === "h2", `page loaded over ${protocol}, expected h2`);
    await secure.evaluate(() => {
      window.got = [];
      window.opens = 0;
      const es = new EventSource("/v1/sse?topic=browser-h2");
      es.onopen = () => { window.opens++; };
      es.onmessage = (e) => { window.got.push(e.data); };
    });
    await secure.waitForFunction(() => window.opens >= 1, null, { timeout: 10000 });
    await publish("browser-h2", { over: "h2" }, tlsAdmin);
    await secure.waitForFunction(() => window.got.length >= 1, null, { timeout: 10000 });
    const h2got = await secure.evaluate(() => window.got);
    assert(JSON.stringify(h2got) === JSON.stringify(['{"over":"h2"}']), `over h2 got ${JSON.stringify(h2got)}`);
    console.log(`EventSource over HTTP/2 (TLS): page protocol ${protocol}, received ${h2got[0]}`);
  }

  // 4. The application logs its user out: heraldpush hears "stay away" and stays closed.
  const userToken = process.env.HERALD_USER_TOKEN;
  if (userToken) {
    const app = await browser.newPage();
    await app.goto(`${base}/`);
    await app.evaluate(async (token) => {
      const { Herald } = await import("/herald-client.js");
      window.events = [];
      window.client = new Herald(location.origin, { token });
      window.client.on("error", (e) => window.events.push(`error ${e.code ?? e.message}`));
      window.client.on("state", (s) => window.events.push(`state ${s}`));
      window.client.subscribe("private-room", () => {});
    }, userToken);
    await app.waitForFunction(() => window.client.state === "open", null, { timeout: 10000 });
    const res = await fetch(`${admin}/v1/users/browser-user/disconnect`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ reason: "logged out", reconnect: false }),
    });
    assert(res.ok, `disconnect answered ${res.status}: ${await res.text()}`);
    await app.waitForFunction(() => window.client.state === "closed", null, { timeout: 10000 });
    const events = await app.evaluate(() => window.events);
    assert(events.includes("error disconnected"), `events: ${JSON.stringify(events)}`);
    const after = await (await fetch(`${admin}/v1/users/browser-user/connections`)).json();
    assert(Object.values(after.nodes).every((ids) => ids.length === 0), `still connected: ${JSON.stringify(after)}`);
    console.log(`heraldpush: disconnected by the application, stays closed: ${JSON.stringify(events)}`);
  }
} finally {
  await browser.close();
}
