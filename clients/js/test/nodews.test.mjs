// The client in Node with the `ws` package given as `options.WebSocket` (as a Node 20
// application does), against a small local WebSocket server speaking Herald's frames, over a
// TCP relay that can go silent: JSON and MessagePack frames, and a silent connection given
// up after `deadTimeout` and dropped at once (`terminate()`), from its cursors.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { WebSocket, WebSocketServer } from "ws";
import { Herald, encodeMsgpack, decodeMsgpack } from "../dist/herald.js";

/** A gateway stand-in: answers subscribe (from the cursor given) and ping, sends `message`s. */
async function fakeGateway() {
  const wss = new WebSocketServer({ port: 0, handleProtocols: (p) => (p.has("herald.msgpack") ? "herald.msgpack" : false) });
  const frames = [];
  wss.on("connection", (sock) => {
    const send = (o) => (sock.protocol === "herald.msgpack" ? sock.send(encodeMsgpack(o)) : sock.send(JSON.stringify(o)));
    sock.on("message", (data, binary) => {
      const f = binary ? decodeMsgpack(new Uint8Array(data)) : JSON.parse(String(data));
      frames.push({ binary, f });
      if (f.type === "ping") send({ type: "pong" });
      if (f.type !== "subscribe") return;
      const from = Number((f.cursors.a ?? "e-0").split("-")[1]);
      send({ type: "subscribed", topics: f.topics, cursors: { a: `e-${from}` } });
      send({ type: "message", topic: "a", id: `e-${from + 1}`, data: { n: from + 1, big: 2 ** 40, bin: new Uint8Array([from + 1]) } });
    });
  });
  await new Promise((r) => wss.on("listening", r));
  return { wss, frames, port: wss.address().port };
}

/** A TCP relay to `port` that drops every byte both ways while `silent`. */
async function relay(port) {
  const r = { silent: false, sockets: new Set() };
  r.server = net.createServer((c) => {
    const u = net.connect(port, "127.0.0.1");
    for (const s of [c, u]) {
      r.sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => (c.destroy(), u.destroy()));
    }
    c.on("data", (d) => r.silent || u.write(d));
    u.on("data", (d) => r.silent || c.write(d));
  });
  await new Promise((ok) => r.server.listen(0, "127.0.0.1", ok));
  r.port = r.server.address().port;
  r.close = () => {
    for (const s of r.sockets) s.destroy();
    r.server.close();
  };
  return r;
}

function until(what, cond, ms = 3000) {
  const end = Date.now() + ms;
  return new Promise((ok, fail) => {
    const check = () => (cond() ? ok() : Date.now() > end ? fail(new Error(`timed out waiting for ${what}`)) : setTimeout(check, 5));
    check();
  });
}

test("node: ws given as options.WebSocket carries JSON and MessagePack frames", async () => {
  const gw = await fakeGateway();
  try {
    for (const format of ["json", "msgpack"]) {
      const herald = new Herald(`http://127.0.0.1:${gw.port}`, { transports: ["websocket"], WebSocket, format });
      const got = [];
      herald.subscribe("a", (m) => got.push(m));
      await until("a message", () => got.length === 1);
      assert.equal(herald.transport, "websocket");
      const bin = format === "msgpack" ? new Uint8Array([1]) : { 0: 1 }; // JSON has no bytes
      assert.deepEqual(got[0], { topic: "a", id: "e-1", data: { n: 1, big: 2 ** 40, bin } });
      assert.equal(gw.frames.at(-1).binary, format === "msgpack");
      herald.close();
    }
  } finally {
    gw.wss.close();
  }
});

test("node: a silent connection is given up after deadTimeout, dropped at once, and resumed from its cursor", async () => {
  const gw = await fakeGateway();
  const r = await relay(gw.port);
  const herald = new Herald(`http://127.0.0.1:${r.port}`, {
    transports: ["websocket"], WebSocket, deadTimeout: 400, openTimeout: 2000, random: () => 0,
  });
  const errors = [];
  const got = [];
  herald.on("error", (e) => errors.push(e.message));
  herald.subscribe("a", (m) => got.push(m.id));
  try {
    await until("the first message", () => got.length === 1);
    r.silent = true;
    await until("the connection given up", () => errors.length === 1);
    assert.match(errors[0], /nothing received for \d+ ms/);
    assert.equal(gw.frames.filter((f) => f.f.type === "ping").length, 0, "the ping halfway was dropped by the relay");
    r.silent = false;
    await until("resumed", () => got.length === 2);
    assert.deepEqual(got, ["e-1", "e-2"]);
    assert.deepEqual(gw.frames.at(-1).f.cursors, { a: "e-1" });
    // The abandoned connection's socket is gone (terminate): only the live one is left.
    await until("one socket left", () => gw.wss.clients.size === 1);
  } finally {
    herald.close();
    r.close();
    gw.wss.close();
  }
});
