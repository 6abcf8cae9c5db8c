// The admin console in headless Chromium, as an operator uses it, against two real `herald`
// processes bridged by Redis: the nodes are listed, the connection count changes when clients
// connect and leave, a message published from the form shows in the live tail, presence and
// rates show.
// Usage: HERALD_BIN=... HERALD_TEST_REDIS_URL=... node console.mjs (exit code 0 = pass)
import { Node, assert, until, launchChromium } from "./harness.mjs";

const redis = process.env.HERALD_TEST_REDIS_URL;
assert(process.env.HERALD_BIN && redis, "HERALD_BIN and HERALD_TEST_REDIS_URL must be set");
const prefix = `browser-console-${process.pid}-${Date.now().toString(36)}`;
const nodes = [];
const browser = await launchChromium();
const streams = [];
try {
  const n1 = await Node.start({ id: "console-1", redis, prefix });
  const n2 = await Node.start({ id: "console-2", redis, prefix });
  nodes.push(n1, n2);
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("requestfailed", (r) => { if (!r.url().includes("/v1/tail/")) problems.push(`${r.url()} failed`); });
  page.on("response", (r) => { if (r.url().includes("/console/") && r.status() !== 200) problems.push(`${r.url()} ${r.status()}`); });
  await page.goto(`${n1.admin}/console`);
  const text = (sel) => page.locator(sel).innerText();
  // A node's row: node, connections, partitions read ("redis 1 / 4").
  const nodeCells = async (id) => {
    const rows = await page.locator("#nodes tbody tr").allInnerTexts();
    const row = rows.find((r) => r.startsWith(id));
    return row === undefined ? undefined : row.split("\t");
  };
  const nodeRow = async (id) => {
    const cells = await nodeCells(id);
    return cells === undefined ? undefined : Number(cells[1]);
  };
  await until("both nodes listed", async () => (await nodeRow("console-1")) === 0 && (await nodeRow("console-2")) === 0);
  assert((await text("#conn-total")) === "0", `connections before: ${await text("#conn-total")}`);

  // Two SSE clients connect to node 1.
  for (let i = 0; i < 2; i++) {
    const abort = new AbortController();
    const res = await fetch(`${n1.public}/v1/sse?topic=console-demo`, { signal: abort.signal });
    assert(res.status === 200, `sse ${res.status}`);
    streams.push(abort);
  }
  await until("the connection count rises to 2", async () =>
    (await text("#conn-total")) === "2" && (await text("#conn-sse")) === "2" && (await nodeRow("console-1")) === 2);
  console.log("console: 2 SSE clients connected → total 2, SSE 2, console-1 holds 2");
  await until("console-1 reads the one topic group of its subscribers", async () =>
    /^redis 1 \/ \d+$/.test((await nodeCells("console-1"))[2]));
  for (const a of streams.splice(0)) a.abort();
  await until("the connection count falls back to 0", async () =>
    (await text("#conn-total")) === "0" && (await nodeRow("console-1")) === 0);

  // Tail a topic, publish from the form, see the message in the tail.
  await page.fill("#tail-topic", "console-demo");
  await page.click("#tail-start");
  await until("tailing", async () => (await text("#tail-status")) === "tailing console-demo");
  await page.fill("#pub-topic", "console-demo");
  await page.fill("#pub-event", "greeting");
  await page.fill("#pub-data", '{"from":"the form"}');
  await page.click("#pub-send");
  await until("published", async () => (await text("#pub-result")).startsWith("published console-demo "));
  await until("the message in the tail", async () => {
    const rows = await page.locator("#tail tbody tr").allInnerTexts();
    return rows.some((r) => r.includes("greeting") && r.includes('{"from":"the form"}'));
  });
  console.log(`console: published from the form (${await text("#pub-result")}) and saw it in the tail`);

  // A message published on the other node reaches the tail too (through Redis).
  await n2.publish("console-demo", { from: "node 2" });
  await until("node 2's message in the tail", async () =>
    (await page.locator("#tail tbody tr").allInnerTexts()).some((r) => r.includes('{"from":"node 2"}')));

  // Bad input in the form gets a clear error, not a request.
  await page.fill("#pub-data", "{not json");
  await page.click("#pub-send");
  await until("a JSON error", async () => (await text("#pub-result")).startsWith("data is not JSON"));

  // Topics, presence and rates.
  await until("the topic listed with the tail as subscriber", async () => {
    const rows = await page.locator("#topics tbody tr").allInnerTexts();
    return rows.some((r) => r.startsWith("console-demo\t1\t"));
  });
  await page.fill("#presence-topic", "console-demo");
  await page.click("#presence-show");
  await until("presence", async () => /^1 subscriber\(s\) — .*console-1: 1/.test(await text("#presence"))).catch(async (e) => { throw new Error(`${e.message}: ${await text("#presence")}`); });
  await until("a publish rate", async () => (await text("#rate-published")) !== "–");
  await page.screenshot({ path: process.env.HERALD_CONSOLE_SCREENSHOT || "/tmp/herald-console.png", fullPage: true });
  assert(problems.length === 0, `page problems: ${problems.join("; ")}`);
  console.log(`console: topics, presence (${await text("#presence")}) and rates shown`);
} finally {
  for (const a of streams) a.abort();
  await browser.close();
  for (const n of nodes) n.stop();
}
