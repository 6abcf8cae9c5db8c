// Node's `ws` client negotiating permessage-deflate (RFC 7692) with a real Herald gateway:
// run by crates/gateway/tests/ws_deflate.rs as
//   node deflate.mjs <ws://public> <http://admin> <wss://tls-public> <http://tls-admin>
// Prints one line per check; exits non-zero on the first failure.

import assert from "node:assert/strict";
import WebSocket from "ws";

const [wsUrl, adminUrl, wssUrl, tlsAdminUrl] = process.argv.slice(2);

/// A large, compressible payload (about 240 KB of JSON).
const big = Array.from({ length: 4000 }, (_, i) => ({ id: i, name: "sensor", state: "ok", tags: ["a", "b"] }));
const bigJson = JSON.stringify(big);

function open(url, perMessageDeflate) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url}/v1/ws`, { perMessageDeflate, rejectUnauthorized: false });
    const inbox = [];
    const waiting = [];
    ws.on("message", (data, isBinary) => {
      assert.equal(isBinary, false, "text frames only");
      const frame = JSON.parse(data.toString("utf8"));
      const next = waiting.shift();
      if (next) next(frame);
      else inbox.push(frame);
    });
    ws.next = () =>
      inbox.length > 0
        ? Promise.resolve(inbox.shift())
        : new Promise((res, rej) => {
            const timer = setTimeout(() => rej(new Error("no frame in 10 s")), 10_000);
            waiting.push((f) => {
              clearTimeout(timer);
              res(f);
            });
          });
    ws.once("upgrade", (res) => (ws.answer = res.headers["sec-websocket-extensions"] ?? ""));
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
  });
}

async function subscribe(ws, topic) {
  ws.send(JSON.stringify({ type: "subscribe", topics: [topic] }));
  const reply = await ws.next();
  assert.equal(reply.type, "subscribed", JSON.stringify(reply));
}

async function publish(admin, topic, data) {
  const res = await fetch(`${admin}/v1/publish`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ topic, data }),
  });
  assert.equal(res.status, 200, await res.text());
}

function closed(ws) {
  return new Promise((resolve) => ws.once("close", (code, reason) => resolve([code, reason.toString()])));
}

const ANSWER = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// The negotiation variants a client may ask for, and what Herald answers.
const variants = [
  [true, ANSWER],
  [{ serverNoContextTakeover: true }, ANSWER],
  [{ clientNoContextTakeover: true }, ANSWER],
  [{ clientMaxWindowBits: 10 }, ANSWER],
  [{ clientMaxWindowBits: true, serverMaxWindowBits: 15 }, `${ANSWER}; server_max_window_bits=15`],
];

async function run(url, admin, label) {
  for (const [options, expected] of variants) {
    const sub = await open(url, options);
    assert.equal(sub.answer, expected, `${label} ${JSON.stringify(options)}`);
    assert.equal(sub.extensions, "permessage-deflate", "the client accepted the answer");
    const topic = `variant-${variants.findIndex((v) => v[0] === options)}`;
    await subscribe(sub, topic);
    const before = sub._socket.bytesRead;
    await publish(admin, topic, big);
    const message = await sub.next();
    assert.deepEqual(message.data, big);
    const read = sub._socket.bytesRead - before;
    assert.ok(read * 10 < bigJson.length, `${label}: ${read} bytes read for ${bigJson.length} of JSON`);
    sub.close();
    console.log(`${label} ${JSON.stringify(options)}: ${sub.answer}; ${bigJson.length} B of JSON in ${read} B`);
  }

  // Publish over the WebSocket, compressed by the client, delivered compressed.
  const publisher = await open(url, true);
  const subscriber = await open(url, true);
  await subscribe(subscriber, "upload");
  const sent = publisher._socket.bytesWritten;
  publisher.send(JSON.stringify({ type: "publish", topic: "upload", data: big }));
  const ack = await publisher.next();
  assert.equal(ack.type, "published", JSON.stringify(ack));
  const written = publisher._socket.bytesWritten - sent;
  assert.ok(written * 10 < bigJson.length, `the client compressed: ${written} B written`);
  const delivered = await subscriber.next();
  assert.equal(delivered.id, ack.id);
  assert.deepEqual(delivered.data, big);
  console.log(`${label} publish over ws: ${written} B written, delivered whole`);

  // A client that does not offer the extension gets plain frames.
  const plain = await open(url, false);
  assert.equal(plain.extensions, "");
  assert.equal(plain.answer, "");
  await subscribe(plain, "upload");
  const before = plain._socket.bytesRead;
  publisher.send(JSON.stringify({ type: "publish", topic: "upload", data: big }));
  assert.deepEqual((await plain.next()).data, big);
  assert.ok(plain._socket.bytesRead - before > bigJson.length, "uncompressed");
  assert.deepEqual((await subscriber.next()).data, big);
  console.log(`${label} no extension offered: plain frames`);

  // A decompression bomb: 16 MiB of spaces, a few KB compressed, past the 1 MiB limit.
  const bomb = await open(url, true);
  const done = closed(bomb);
  bomb.send(" ".repeat(16 << 20));
  const [code, reason] = await done;
  assert.equal(code, 1009, reason);
  assert.match(reason, /inflates to more than 1048576 bytes/);
  console.log(`${label} bomb: ${code} ${reason}`);

  for (const ws of [publisher, subscriber, plain]) ws.close();
}

await run(wsUrl, adminUrl, "ws");
await run(wssUrl, tlsAdminUrl, "wss");
console.log("ok");
