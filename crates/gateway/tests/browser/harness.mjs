// Helpers of the browser tests: real `herald` processes, a test proxy in front of one (which
// can refuse WebSocket upgrades and cut SSE streams), the built client served to the page,
// and Chromium launched the way this machine needs.
import { spawn } from "node:child_process";
import { readFile, writeFile, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { chromium } from "playwright-core";

export function assert(cond, message) {
  if (!cond) throw new Error(message);
}

/** Polls `cond` (sync or async) until true, or fails with `what` after `ms`. */
export async function until(what, cond, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      if (await cond()) return;
    } catch (e) {
      if (e instanceof Error && e.message.startsWith("herald ")) throw e; // a node died
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Ports handed out by `freePort` in this process: nodes keep theirs across restarts. */
const given = new Set();

/** A free loopback port (bound to 0, then released), never one handed out before here: the
 * kernel may offer a port again once it is released, and a node's two listeners must
 * differ. */
export async function freePort() {
  for (;;) {
    const port = await new Promise((resolve, reject) => {
      const s = net.createServer();
      s.once("error", reject);
      s.listen(0, "127.0.0.1", () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
    if (!given.has(port)) {
      given.add(port);
      return port;
    }
  }
}

/** A `herald` process. `restart()` starts it again on the same ports. */
export class Node {
  static async start({ id, redis, prefix, dev = false, extraToml = "" }) {
    const node = new Node();
    node.id = id;
    node.publicPort = await freePort();
    node.adminPort = await freePort();
    node.dev = dev;
    node.redis = redis;
    const dir = await mkdtemp(path.join(tmpdir(), "herald-browser-"));
    node.configFile = path.join(dir, "herald.toml");
    let toml = `[shutdown]\ngrace = "3s"\nreconnect_jitter = "300ms"\n[sse]\nretry = "300ms"\n${extraToml}\n`;
    if (redis) toml += `[cluster]\nredis_prefix = "${prefix}"\nredis_shards = 4\npresence_interval = "300ms"\n`;
    await writeFile(node.configFile, toml);
    await node.spawn();
    return node;
  }

  get public() {
    return `http://127.0.0.1:${this.publicPort}`;
  }

  get admin() {
    return `http://127.0.0.1:${this.adminPort}`;
  }

  async spawn() {
    const args = ["--listen", `127.0.0.1:${this.publicPort}`, "--admin-listen", `127.0.0.1:${this.adminPort}`,
      "--node-id", this.id, "--log-filter", "warn"];
    if (this.redis) args.push("--redis-url", this.redis);
    if (this.dev) args.push("--dev");
    this.child = spawn(process.env.HERALD_BIN, args, {
      env: { ...process.env, HERALD_CONFIG: this.configFile },
      stdio: ["ignore", "inherit", "inherit"],
    });
    this.exited = new Promise((resolve) => this.child.once("exit", (code, signal) => resolve({ code, signal })));
    let exit;
    this.exited.then((e) => { exit = e; });
    await until(`${this.id} ready`, async () => {
      if (exit) throw new Error(`herald ${this.id} exited before it was ready: ${JSON.stringify(exit)}`);
      return (await fetch(`${this.admin}/readyz`)).status === 200;
    });
  }

  /** SIGTERM: the node drains, then exits. */
  async drain() {
    this.child.kill("SIGTERM");
    return this.exited;
  }

  /** SIGKILL: gone without a goodbye. */
  async kill() {
    this.child.kill("SIGKILL");
    return this.exited;
  }

  async restart() {
    await this.spawn();
  }

  stop() {
    if (this.child && this.child.exitCode === null) this.child.kill("SIGKILL");
  }

  async publish(topic, data, event) {
    const body = { topic, data };
    if (event) body.event = event;
    const res = await fetch(`${this.admin}/v1/publish`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`publish on ${this.id} answered ${res.status}: ${await res.text()}`);
    return (await res.json()).id;
  }
}

/**
 * A test proxy on a port of its own: serves the built client and a blank page under
 * `/__client/`, and forwards everything else to `target` (a Herald public listener), unless
 * told to refuse WebSocket upgrades (`ws = "refuse"`: 403), to cut SSE streams
 * (`sse = "cut"`: a 200 event stream that ends at once) or to buffer them (`sse = "buffer"`:
 * a 200 event stream of which nothing arrives), as proxies that do not let them through do. `cutOpen()` ends the streams and sockets already forwarded.
 */
export class Proxy {
  static async start({ target, dist }) {
    const p = new Proxy();
    p.target = target ? new URL(target) : undefined;
    p.dist = dist;
    p.ws = "allow";
    p.sse = "allow";
    p.refused = { ws: 0, sse: 0 };
    p.open = new Set();
    p.server = http.createServer((req, res) => p.onRequest(req, res));
    p.server.on("upgrade", (req, socket, head) => p.onUpgrade(req, socket, head));
    await new Promise((r) => p.server.listen(0, "127.0.0.1", r));
    p.url = `http://127.0.0.1:${p.server.address().port}`;
    return p;
  }

  async onRequest(req, res) {
    if (req.url.startsWith("/__client/")) {
      const name = req.url.slice("/__client/".length).split("?")[0];
      if (name === "page.html") {
        res.writeHead(200, { "content-type": "text/html" });
        res.end("<!doctype html><title>heraldpush test</title><body>heraldpush test</body>");
        return;
      }
      if (!/^[a-z]+\.js$/.test(name)) {
        res.writeHead(404).end();
        return;
      }
      try {
        const body = await readFile(path.join(this.dist, name));
        res.writeHead(200, { "content-type": "text/javascript", "cache-control": "no-store" });
        res.end(body);
      } catch {
        res.writeHead(404).end();
      }
      return;
    }
    if (!this.target) {
      res.writeHead(404).end();
      return;
    }
    if (req.url.startsWith("/v1/sse") && this.sse === "cut") {
      this.refused.sse++;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end();
      return;
    }
    if (req.url.startsWith("/v1/sse") && this.sse === "buffer") {
      // A buffering proxy: the response starts, and nothing of the stream ever comes through.
      this.refused.sse++;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      const entry = { kind: "sse", end: () => res.destroy() };
      this.open.add(entry);
      res.on("close", () => this.open.delete(entry));
      return;
    }
    const upstream = http.request({
      host: this.target.hostname, port: this.target.port, method: req.method, path: req.url,
      headers: req.headers,
    }, (up) => {
      res.writeHead(up.statusCode, up.headers);
      res.flushHeaders();
      up.pipe(res);
      if (req.url.startsWith("/v1/sse")) {
        const entry = { kind: "sse", end: () => { up.destroy(); res.destroy(); } };
        this.open.add(entry);
        res.on("close", () => this.open.delete(entry));
      }
    });
    upstream.on("error", () => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
      res.end('{"code":"bad_gateway","reason":"the test proxy could not reach herald"}');
    });
    req.pipe(upstream);
  }

  onUpgrade(req, socket, head) {
    if (!this.target || this.ws === "refuse") {
      this.refused.ws++;
      socket.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
      return;
    }
    const up = net.connect(Number(this.target.port), this.target.hostname, () => {
      let raw = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) raw += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
      up.write(raw + "\r\n");
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    const entry = { kind: "ws", end: () => { up.destroy(); socket.destroy(); } };
    this.open.add(entry);
    const done = () => { this.open.delete(entry); up.destroy(); socket.destroy(); };
    up.on("error", done);
    up.on("close", done);
    socket.on("error", done);
    socket.on("close", done);
  }

  /** Cuts the forwarded streams of `kind` ("ws" or "sse"). */
  cutOpen(kind) {
    for (const e of [...this.open]) if (e.kind === kind) e.end();
  }

  close() {
    for (const e of [...this.open]) e.end();
    this.server.closeAllConnections?.();
    this.server.close();
  }
}

export async function launchChromium() {
  return chromium.launch({
    executablePath: process.env.HERALD_CHROMIUM || "/usr/bin/chromium",
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}
