// herald-client: the Herald push gateway's client for browsers and Node ≥ 20.
//
// One connection carries every subscription. It uses the first transport of
// `options.transports` that gets through (WebSocket, then SSE, then long-poll by default),
// falls back to the next when one cannot connect or is cut off at once, and tries the
// preferred one again every `upgradeInterval`. It keeps one cursor per topic and resumes
// from it on every reconnect, on every transport and on every node, so the application sees
// every message once and in order, or an explicit `onLost`. A prefix pattern (`orders.*`)
// subscribes to every matching topic: the client keeps a cursor for each topic it delivered
// (the most recent `MAX_PATTERN_TOPICS`) and resumes them under the pattern.

import type {
  CloseInfo,
  Connection,
  ConnectionContext,
  ConnectionHandlers,
  HeraldMessage,
  LostInfo,
  State,
  TransportName,
} from "./types.js";
import { HeraldError } from "./types.js";
import { isAfter, isTopicName, parseCursor } from "./cursor.js";
import { MAX_PATTERN_TOPICS, isPattern, matchesPattern, subscriptionError } from "./pattern.js";
import { fullJitter, type BackoffOptions } from "./backoff.js";
import { WsConnection } from "./websocket.js";
import { PollConnection, SseConnection, refusal } from "./http.js";

export type { HeraldMessage, LostInfo, State, TransportName, CloseInfo, Connection, ConnectionContext, ConnectionHandlers };
export { HeraldError };
export { parseCursor, parseResumeList, formatResumeList, isAfter, isTopicName } from "./cursor.js";
export { MAX_PATTERN_TOPICS, isPattern, matchesPattern, subscriptionError } from "./pattern.js";
export { fullJitter } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export { SseParser } from "./sse.js";

/** A token, or a function giving a fresh one (called again before the last one expires). */
export type TokenSource = string | (() => string | Promise<string>);

export interface HeraldOptions {
  /** The transports to try, in order (default: `["websocket", "sse", "poll"]`). */
  transports?: TransportName[];
  /** A JWT for private topics and publishing. A function is called for the first token and
   *  again `tokenRefreshMargin` ms before each one expires (read from its `exp` claim), and
   *  once more when the gateway refuses a token as invalid or expired. */
  token?: TokenSource;
  /** Refresh a token this long before it expires, in ms (default 30000). */
  tokenRefreshMargin?: number;
  /** Reconnect backoff with full jitter (default base 500 ms, max 30000 ms). */
  backoff?: BackoffOptions;
  /** Try the preferred transport again this often while on a fallback, in ms (default 30000). */
  upgradeInterval?: number;
  /** Longest wait for a connection to open (WebSocket subscribed, SSE opening block, first
   *  poll answered), in ms (default 10000). Past it the transport counts as failed. */
  openTimeout?: number;
  /** A connection cut before it was open this long counts as a failure of its transport (the
   *  next attempt uses the next transport); after, it reconnects on the same (default 5000). */
  stableAfter?: number;
  /** Seconds a long-poll is held (default 25; the gateway caps it at `poll.timeout`). */
  pollTimeout?: number;
  /** Most topics at once, a pattern counting as one (default 64, the gateway's
   *  `limits.max_subscriptions`). */
  maxTopics?: number;
  /** `fetch` credentials mode for SSE, poll and publish (default `same-origin`; `include`
   *  sends cookies cross-site where the gateway's CORS allows credentials). */
  credentials?: RequestCredentials;
  /** An API key sent as `x-api-key` by `publish` over HTTP (services, not browsers). */
  apiKey?: string;
  /** A `WebSocket` constructor (default: the global one; Node 20 needs one passed, e.g.
   *  from the `ws` package, or the `websocket` transport is skipped). */
  WebSocket?: typeof WebSocket;
  /** A `fetch` (default: the global one). */
  fetch?: typeof fetch;
  /** For tests: makes connections instead of the built-in transports. */
  connect?: (transport: TransportName, ctx: ConnectionContext, handlers: ConnectionHandlers) => Connection;
  /** For tests: a random number in [0, 1) (default `Math.random`). */
  random?: () => number;
  /** The personal topic `user:<sub>` of the token's `sub`, where the application's
   *  `POST /v1/users/{user}/send` messages arrive (to `serverMessage` listeners):
   *  - `"auto"` (default): once the application subscribed the connection to it, the client
   *    keeps it, subscribing it again itself (from its cursor) on every later connection, so
   *    that no message sent meanwhile is missed;
   *  - `"always"`: subscribe it from the start, on every transport (long-poll receives
   *    server-side messages only this way);
   *  - `"off"`: like any server-side subscription, it ends with the connection. */
  personalTopic?: "auto" | "always" | "off";
}

export interface SubscribeOptions {
  /** Called when the gateway signals that messages of this topic were lost; for a pattern,
   *  of one of its topics (`info.topic` names it), or of the pattern as a whole when the
   *  client fell behind its live stream (`info.topic` is the pattern). */
  onLost?: (info: LostInfo) => void;
  /** Start with the newest `last` messages the topic's history holds (fewer when it holds
   *  fewer), then live. Used only while the client holds no cursor for the topic (its first
   *  subscription); every later connection resumes from the cursor. Not for a pattern. */
  last?: number;
}

/** Topics the application subscribed this connection to, or unsubscribed it from. */
export interface ServerTopics {
  topics: string[];
}

/** Topics that no longer reach the client as server-side subscriptions. */
export interface ServerUnsubscribed extends ServerTopics {
  /** `server`: the application unsubscribed them (admin API); `connection`: the connection
   *  they were made on ended (a reconnect, a transport switch, an SSE stream restarted for a
   *  topic change), and the gateway does not carry them to the next one. */
  reason: "server" | "connection";
}

export interface Subscription {
  /** The topic or pattern subscribed to. */
  readonly topic: string;
  /** Stops this subscription (the topic is unsubscribed when no other subscription wants it). */
  unsubscribe(): void;
}

export type HeraldEvents = {
  state: State;
  transport: TransportName;
  error: Error;
  lost: LostInfo;
  serverSubscribe: ServerTopics;
  serverUnsubscribe: ServerUnsubscribed;
  serverMessage: HeraldMessage;
};
type Events = HeraldEvents;

interface Sub {
  /** A topic, or a pattern (`orders.*`). */
  topic: string;
  onMessage: (m: HeraldMessage) => void;
  onLost: ((info: LostInfo) => void) | undefined;
  last: number | undefined;
  active: boolean;
}

/** A JWT's claims, read without verifying it (the gateway does). */
function claims(token: string): Record<string, unknown> | undefined {
  const part = token.split(".")[1];
  if (!part) return undefined;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const c = JSON.parse(atob(b64)) as unknown;
    return typeof c === "object" && c !== null ? (c as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

const ALL: TransportName[] = ["websocket", "sse", "poll"];

/** Seconds of a JWT's `exp` claim, if it has one. */
export function tokenExpiry(token: string): number | undefined {
  const exp = claims(token)?.exp;
  return typeof exp === "number" ? exp : undefined;
}

/** The personal topic `user:<sub>` of a JWT's `sub` claim, if it has one. */
export function personalTopic(token: string): string | undefined {
  const sub = claims(token)?.sub;
  if (typeof sub !== "string") return undefined;
  const topic = `user:${sub}`;
  return isTopicName(topic) ? topic : undefined;
}

export class Herald {
  private readonly urls: string[];
  private readonly transports: TransportName[];
  private readonly opts: Required<
    Pick<HeraldOptions, "tokenRefreshMargin" | "upgradeInterval" | "openTimeout" | "stableAfter" | "pollTimeout" | "maxTopics" | "credentials">
  >;
  private readonly backoff: BackoffOptions;
  private readonly random: () => number;
  /** Subscriptions by topic or pattern. */
  private readonly subs = new Map<string, Set<Sub>>();
  /** The patterns among `subs`' keys. */
  private readonly patterns = new Set<string>();
  /** Cursors of the topics subscribed, held by the application, or delivered by a pattern. */
  private readonly cursors = new Map<string, string>();
  /** Topics delivered by a pattern and not subscribed by name, the least recently delivered
   *  first: past `MAX_PATTERN_TOPICS` the first is forgotten (as the gateway does). */
  private readonly recent = new Set<string>();
  /** Starting positions a connection reported in another epoch than the cursor's: where
   *  delivery goes on once that connection's loss signal arrives. */
  private readonly hints = new Map<string, string>();
  private readonly listeners: { [K in keyof Events]: Set<(v: Events[K]) => void> } = {
    state: new Set(),
    transport: new Set(),
    error: new Set(),
    lost: new Set(),
    serverSubscribe: new Set(),
    serverUnsubscribe: new Set(),
    serverMessage: new Set(),
  };
  /** Topics the application subscribed each live connection to (the connection's and the
   *  probe's), as the connection reported them. */
  private readonly serverSets = new Map<Connection, Set<string>>();
  /** The personal topic is kept across connections (`personalTopic`). */
  private keepPersonal = false;

  private _state: State = "connecting";
  private _transport: TransportName | undefined;
  private conn: Connection | undefined;
  private connTransport = 0;
  private connOpenedAt: number | undefined;
  private probe: Connection | undefined;
  private ti = 0;
  private ui = 0;
  private failsHere = 0;
  private failures = 0;
  private everOpen = false;
  private closed = false;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private probeTimer: ReturnType<typeof setTimeout> | undefined;
  private updateQueued = false;
  private token: string | undefined;
  private tokenTimer: ReturnType<typeof setTimeout> | undefined;
  private tokenPromise: Promise<void> | undefined;
  private authRetried = false;
  /** A connection attempt waits for its token. */
  private starting = false;

  constructor(url: string | string[], private readonly options: HeraldOptions = {}) {
    this.urls = (Array.isArray(url) ? url : [url]).map((u) => new URL(u).toString());
    if (this.urls.length === 0) throw new TypeError("Herald: give at least one gateway URL");
    const wanted = options.transports ?? ALL;
    for (const t of wanted) {
      if (!ALL.includes(t)) throw new TypeError(`Herald: unknown transport ${JSON.stringify(t)}`);
    }
    const hasWs = !!(options.WebSocket ?? globalThis.WebSocket) || !!options.connect;
    this.transports = wanted.filter((t) => t !== "websocket" || hasWs);
    if (this.transports.length === 0) throw new TypeError("Herald: no usable transport (no WebSocket here?)");
    this.opts = {
      tokenRefreshMargin: options.tokenRefreshMargin ?? 30000,
      upgradeInterval: options.upgradeInterval ?? 30000,
      openTimeout: options.openTimeout ?? 10000,
      stableAfter: options.stableAfter ?? 5000,
      pollTimeout: options.pollTimeout ?? 25,
      maxTopics: options.maxTopics ?? 64,
      credentials: options.credentials ?? "same-origin",
    };
    this.backoff = options.backoff ?? {};
    this.random = options.random ?? Math.random;
    if (typeof options.token === "string") this.setToken(options.token);
    if (options.personalTopic === "always") {
      this.keepPersonal = true;
      this.topicsChanged();
    }
  }

  /** The connection's state. */
  get state(): State {
    return this._state;
  }

  /** The transport in use now (the last one that opened), if any. */
  get transport(): TransportName | undefined {
    return this._transport;
  }

  /** A topic's cursor: the id of the last message delivered, or its starting position (a
   *  topic a pattern delivered included). */
  cursor(topic: string): string | undefined {
    return this.cursors.get(topic);
  }

  /** The topics whose messages go to `serverMessage` listeners: those the application
   *  subscribed the connection to (and the kept personal topic), less those the client
   *  subscribed itself. */
  get serverTopics(): string[] {
    const out = new Set<string>(this.conn ? this.serverSets.get(this.conn) : undefined);
    const personal = this.personal();
    if (personal) out.add(personal);
    return [...out].filter((t) => !this.ownTopic(t));
  }

  /** Listens to `state`, `transport`, `error` (a refusal, a failed attempt), `lost` (loss
   *  signals of subscriptions without `onLost`), `serverSubscribe` / `serverUnsubscribe`
   *  (the application subscribed the connection to topics, or they ended) and
   *  `serverMessage` (messages of those topics). Listening to `serverMessage` opens a
   *  WebSocket even without a subscription. Returns a function that stops listening. */
  on<K extends keyof Events>(event: K, fn: (v: Events[K]) => void): () => void {
    this.listeners[event].add(fn);
    if (event === "serverMessage") this.topicsChanged();
    return () => this.off(event, fn);
  }

  off<K extends keyof Events>(event: K, fn: (v: Events[K]) => void): void {
    this.listeners[event].delete(fn);
  }

  /** Subscribes `onMessage` to `topic`, or to every topic a prefix pattern such as
   *  `orders.*` matches. Many subscriptions share one connection. */
  subscribe(topic: string, onMessage: (m: HeraldMessage) => void, options: SubscribeOptions = {}): Subscription {
    if (this.closed) throw new Error("Herald: subscribe after close()");
    const pattern = isPattern(topic);
    const bad = subscriptionError(topic);
    if (bad !== undefined) {
      throw new TypeError(`Herald: bad ${pattern ? "pattern" : "topic name"} ${JSON.stringify(topic)}: ${bad}`);
    }
    if (options.last !== undefined && !(Number.isInteger(options.last) && options.last >= 0)) {
      throw new RangeError(`Herald: last must be a whole number, not ${String(options.last)}`);
    }
    if (options.last !== undefined && pattern) {
      throw new TypeError(`Herald: last does not apply to a pattern (${JSON.stringify(topic)}): it starts its topics live`);
    }
    let set = this.subs.get(topic);
    if (!set) {
      if (this.subs.size >= this.opts.maxTopics) {
        throw new RangeError(`Herald: at most ${this.opts.maxTopics} topics per connection`);
      }
      set = new Set();
      this.subs.set(topic, set);
      if (pattern) this.patterns.add(topic);
      // Subscribed by name now: its cursor (a pattern's until now) goes with the topic.
      else this.recent.delete(topic);
      this.topicsChanged();
    }
    const sub: Sub = { topic, onMessage, onLost: options.onLost, last: options.last, active: true };
    set.add(sub);
    return {
      topic,
      unsubscribe: () => {
        if (!sub.active) return;
        sub.active = false;
        const s = this.subs.get(topic);
        s?.delete(sub);
        if (s && s.size === 0) {
          this.subs.delete(topic);
          if (pattern) {
            this.patterns.delete(topic);
            // The topics no other pattern delivers go with their cursors.
            for (const t of [...this.recent]) {
              if (this.patternOf(t) === undefined) {
                this.recent.delete(t);
                if (!this.isServerTopic(t)) this.forget(t);
              }
            }
          } else if (this.patternOf(topic) !== undefined) {
            // A pattern still delivers it: its cursor stays, as the pattern's.
            this.touch(topic);
          } else if (!this.isServerTopic(topic)) {
            this.forget(topic);
          }
          this.topicsChanged();
        }
      },
    };
  }

  /** Publishes: over the WebSocket when it is open (the token's `publish` claim must allow
   *  the topic), else with `POST /v1/publish` on the gateway (a token or `apiKey`). */
  async publish(topic: string, data: unknown, options: { event?: string } = {}): Promise<{ id: string; topic: string }> {
    if (!isTopicName(topic)) throw new TypeError(`Herald: bad topic name ${JSON.stringify(topic)}`);
    if (this.options.token !== undefined && this.token === undefined) await this.refreshToken();
    const conn = this.conn;
    if (conn?.publish && this._state === "open") return conn.publish(topic, data, options.event);
    const body: Record<string, unknown> = { topic, data };
    if (options.event !== undefined) body.event = options.event;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (this.options.apiKey) headers["x-api-key"] = this.options.apiKey;
    const f = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    const res = await f(new URL("/v1/publish", this.urls[this.ui]), {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      credentials: this.opts.credentials,
    });
    if (!res.ok) {
      const info = await refusal(res, "publish");
      throw info.fatal ?? new HeraldError(res.status, `http_${res.status}`, info.reason);
    }
    return (await res.json()) as { id: string; topic: string };
  }

  /** Closes the connection for good. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.probeTimer);
    clearTimeout(this.tokenTimer);
    this.probe?.close();
    this.probe = undefined;
    this.conn?.close();
    this.conn = undefined;
    this.serverSets.clear();
    this.setState("closed");
  }

  // ---- server-side subscriptions ----

  /** The kept personal topic, if any (from the current token's `sub`). */
  private personal(): string | undefined {
    if (!this.keepPersonal || this.options.personalTopic === "off" || !this.token) return undefined;
    return personalTopic(this.token);
  }

  /** The topics the client subscribes itself: its subscriptions and the kept personal topic. */
  private wanted(): Set<string> {
    const out = new Set(this.subs.keys());
    const personal = this.personal();
    if (personal) out.add(personal);
    return out;
  }

  /** Whether the client holds a connection without any topic: for `serverMessage`
   *  listeners (a WebSocket can be subscribed by the application). */
  private serverListening(): boolean {
    return this.listeners.serverMessage.size > 0;
  }

  private isServerTopic(topic: string): boolean {
    if (topic === this.personal()) return true;
    for (const set of this.serverSets.values()) if (set.has(topic)) return true;
    return false;
  }

  /** A connection reports topics the application subscribed it to. */
  private onServerSubscribed(conn: Connection, topics: string[], main: boolean): void {
    let set = this.serverSets.get(conn);
    if (!set) this.serverSets.set(conn, (set = new Set()));
    const added = topics.filter((t) => isTopicName(t) && !set.has(t));
    for (const t of added) set.add(t);
    const personal = this.token ? personalTopic(this.token) : undefined;
    let keep = false;
    if (personal && added.includes(personal) && !this.keepPersonal && this.options.personalTopic !== "off") {
      this.keepPersonal = true;
      keep = true;
    }
    if (main) {
      const told = added.filter((t) => !this.ownTopic(t));
      if (told.length > 0) this.emit("serverSubscribe", { topics: told });
    }
    // The kept personal topic joins the topics the client asks for (a no-op on this
    // connection, which holds it already).
    if (keep) this.topicsChanged();
  }

  /** A connection reports topics the application dropped, or that its new stream lost. */
  private onServerUnsubscribed(conn: Connection, topics: string[], ended: boolean, main: boolean): void {
    const set = this.serverSets.get(conn);
    const removed = topics.filter((t) => set?.has(t) || (!ended && t === this.personal()));
    for (const t of removed) set?.delete(t);
    if (!ended && this.personal() !== undefined && removed.includes(this.personal()!)) this.keepPersonal = false;
    if (main) this.serverTopicsGone(removed, ended ? "connection" : "server");
    // The client's own subscriptions to a topic the application dropped are asked for again.
    if (!ended) this.topicsChanged();
  }

  /** Topics no longer subscribed by the application: their cursors go unless the client
   *  holds them itself; the application is told. */
  private serverTopicsGone(topics: string[], reason: "server" | "connection"): void {
    const wanted = this.wanted();
    const gone = topics.filter((t) => !wanted.has(t));
    for (const t of gone) {
      if (this.isServerTopic(t)) continue;
      // A topic a pattern delivers keeps its cursor, as the pattern's.
      if (this.patternOf(t) !== undefined) this.touch(t);
      else this.forget(t);
    }
    const told = gone.filter((t) => !this.ownTopic(t));
    if (told.length > 0) this.emit("serverUnsubscribe", { topics: told, reason });
  }

  /** A connection ended, or was replaced by `next`: what the application had subscribed it
   *  to ends with it (the gateway does not carry it over). */
  private connectionEnded(conn: Connection, next?: Connection): void {
    const set = this.serverSets.get(conn);
    this.serverSets.delete(conn);
    if (!set) return;
    const carried = next ? this.serverSets.get(next) : undefined;
    const lost = [...set].filter((t) => !carried?.has(t));
    this.serverTopicsGone(lost, "connection");
  }

  // ---- connection life ----

  private topicsChanged(): void {
    if (this.closed || this.updateQueued) return;
    this.updateQueued = true;
    // Batched: subscriptions made in one tick change the connection once.
    queueMicrotask(() => {
      this.updateQueued = false;
      if (this.closed) return;
      if (this.wanted().size === 0) {
        // SSE and poll need a topic; a WebSocket stays open for the next subscription.
        if (this.conn && this.conn.transport !== "websocket") this.drop();
        this.probe?.close();
        this.probe = undefined;
        if (this.conn) {
          this.conn.update();
          return;
        }
        // Nothing to subscribe: a WebSocket opens for `serverMessage` listeners, and any
        // transport once the token names the personal topic (`always`).
        if (!this.serverListening() && !this.personalPending()) return;
      }
      if (this.conn) {
        this.conn.update();
        this.probe?.update();
      } else if (this.retryTimer === undefined) {
        void this.connect();
      }
    });
  }

  private drop(): void {
    const old = this.conn;
    old?.close();
    this.conn = undefined;
    if (old) this.connectionEnded(old);
    clearTimeout(this.probeTimer);
    if (this._state !== "closed") this.setState("connecting");
  }

  private context(url: string): ConnectionContext {
    return {
      url,
      topics: () => {
        const m = new Map<string, string | undefined>();
        for (const t of this.wanted()) m.set(t, this.cursors.get(t));
        return m;
      },
      patternCursors: () => {
        const wanted = this.wanted();
        const m = new Map<string, string>();
        for (const t of this.recent) {
          const c = this.cursors.get(t);
          if (c !== undefined && !wanted.has(t) && this.patternOf(t) !== undefined) m.set(t, c);
        }
        return m;
      },
      last: (topic) => {
        let last: number | undefined;
        for (const sub of this.subs.get(topic) ?? []) {
          if (sub.active && sub.last !== undefined && (last === undefined || sub.last > last)) last = sub.last;
        }
        return last;
      },
      token: () => this.token,
      fetch: this.options.fetch ?? globalThis.fetch.bind(globalThis),
      WebSocket: this.options.WebSocket ?? globalThis.WebSocket,
      credentials: this.opts.credentials,
      openTimeout: this.opts.openTimeout,
      pollTimeout: this.opts.pollTimeout,
    };
  }

  private make(transport: TransportName, url: string, handlers: ConnectionHandlers): Connection {
    const ctx = this.context(url);
    if (this.options.connect) return this.options.connect(transport, ctx, handlers);
    switch (transport) {
      case "websocket":
        return new WsConnection(ctx, handlers);
      case "sse":
        return new SseConnection(ctx, handlers);
      case "poll":
        return new PollConnection(ctx, handlers);
    }
  }

  private async connect(): Promise<void> {
    this.retryTimer = undefined;
    if (this.closed || this.conn || this.starting || !this.mayConnect(this.ti)) return;
    if (this.options.token !== undefined && this.token === undefined) {
      this.starting = true;
      try {
        await this.refreshToken();
      } catch (e) {
        this.emit("error", e instanceof Error ? e : new Error(String(e)));
        this.schedule(fullJitter(this.failures++, this.backoff, this.random));
        return;
      } finally {
        this.starting = false;
      }
      if (this.closed || this.conn || this.retryTimer !== undefined || !this.mayConnect(this.ti)) return;
    }
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    const ti = this.ti;
    const conn = this.spawn(ti, this.urls[this.ui]!);
    if (!conn) return;
    this.conn = conn;
    this.connTransport = ti;
    this.connOpenedAt = undefined;
  }

  /** A connection of transport `ti` whose reports count while it is the connection, or the
   *  probe (which becomes the connection when it opens). */
  private spawn(ti: number, url: string): Connection | undefined {
    const transport = this.transports[ti]!;
    let conn: Connection | undefined;
    const main = () => conn !== undefined && this.conn === conn;
    const probing = () => conn !== undefined && this.probe === conn;
    const handlers: ConnectionHandlers = {
      open: () => {
        if (probing()) this.promote(conn!, ti);
        else if (main()) this.onOpen(ti, transport);
      },
      message: (m) => {
        if (main() || probing()) this.deliver(m, conn!);
      },
      lost: (info, cursor) => {
        if (main() || probing()) this.onLostSignal(info, cursor);
      },
      position: (topic, cursor) => {
        if (main() || probing()) this.position(topic, cursor);
      },
      serverSubscribed: (topics) => {
        if (main() || probing()) this.onServerSubscribed(conn!, topics, main());
      },
      serverUnsubscribed: (topics, ended) => {
        if (main() || probing()) this.onServerUnsubscribed(conn!, topics, ended, main());
      },
      close: (info) => {
        if (main()) {
          this.conn = undefined;
          this.connectionEnded(conn!);
          this.onClose(info, ti);
        } else if (probing()) {
          this.probe = undefined;
          this.serverSets.delete(conn!);
          // Still failing: try the next preferred one, or wait for the next round.
          if (ti + 1 < this.connTransport) this.startProbe(ti + 1);
          else this.scheduleProbe();
        }
      },
    };
    try {
      conn = this.make(transport, url, handlers);
      return conn;
    } catch (e) {
      if (this.probe === undefined && this.conn === undefined) {
        this.onClose({ reason: `${transport}: ${e instanceof Error ? e.message : String(e)}` }, ti);
      }
      return undefined;
    }
  }

  /** The probe of a preferred transport opened: it becomes the connection. It subscribed
   *  with the cursors of the moment, and what the old connection delivered meanwhile is not
   *  delivered twice (cursors only move forward). */
  private promote(probe: Connection, ti: number): void {
    const old = this.conn;
    this.probe = undefined;
    this.conn = probe;
    old?.close();
    const before = old ? this.serverSets.get(old) : undefined;
    if (old) this.connectionEnded(old, probe);
    // What the application subscribed the probe to (a connect hook), it is told now.
    const fresh = [...(this.serverSets.get(probe) ?? [])].filter((t) => !before?.has(t) && !this.ownTopic(t));
    if (fresh.length > 0) this.emit("serverSubscribe", { topics: fresh });
    this.ti = ti;
    this.failsHere = 0;
    this.onOpen(ti, this.transports[ti]!);
  }

  private isWs(ti: number): boolean {
    return this.transports[ti] === "websocket";
  }

  /** Whether transport `ti` has something to connect for: a topic (the kept personal topic
   *  counts once the token is known); a WebSocket may open without any (the application
   *  may subscribe it). */
  private mayConnect(ti: number): boolean {
    return this.isWs(ti) || this.wanted().size > 0 || this.personalPending();
  }

  /** The personal topic is kept but the token that names it is not fetched yet. */
  private personalPending(): boolean {
    return this.keepPersonal && this.options.personalTopic !== "off" && this.token === undefined && this.options.token !== undefined;
  }

  private onOpen(ti: number, transport: TransportName): void {
    this.connOpenedAt = Date.now();
    this.everOpen = true;
    this.authRetried = false;
    this.connTransport = ti;
    this.setState("open");
    if (this._transport !== transport) {
      this._transport = transport;
      this.emit("transport", transport);
    }
    this.scheduleProbe();
  }

  private onClose(info: CloseInfo, ti: number): void {
    clearTimeout(this.probeTimer);
    this.probe?.close();
    this.probe = undefined;
    this.hints.clear();
    if (this.closed) return;
    const openedAt = this.connOpenedAt;
    this.connOpenedAt = undefined;
    if (info.fatal) {
      const invalidToken = info.fatal.code === "invalid_token" || info.fatal.status === 401;
      if (invalidToken && typeof this.options.token === "function" && !this.authRetried) {
        // One fresh token, then the same refusal is final.
        this.authRetried = true;
        this.token = undefined;
        this.setState("reconnecting");
        this.schedule(0);
        return;
      }
      this.emit("error", info.fatal);
      this.close();
      return;
    }
    this.emit("error", new Error(info.reason));
    if (info.tokenExpired) this.token = undefined;
    const stable = openedAt !== undefined && Date.now() - openedAt >= this.opts.stableAfter;
    let delay: number;
    if (info.shutdown) {
      // The node drains: come back after its hint (already spread per client) or a jittered
      // pause, on the same transport; not a failure of the transport.
      delay = info.retryMs ?? fullJitter(3, this.backoff, this.random);
    } else if (stable) {
      this.failures = 0;
      this.failsHere = 0;
      delay = info.retryMs ?? fullJitter(0, this.backoff, this.random);
    } else {
      // Could not connect, or cut off at once: next URL, and after every URL failed on this
      // transport, the next transport.
      this.ui = (this.ui + 1) % this.urls.length;
      this.failsHere++;
      if (this.failsHere >= this.urls.length && ti === this.ti) {
        this.failsHere = 0;
        this.ti = (this.ti + 1) % this.transports.length;
      }
      delay = Math.max(info.retryMs ?? 0, fullJitter(this.failures++, this.backoff, this.random));
    }
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    this.schedule(delay);
  }

  private schedule(delay: number): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.connect(), delay);
  }

  /** While on a fallback, tries the transports before it every `upgradeInterval`. */
  private scheduleProbe(): void {
    clearTimeout(this.probeTimer);
    if (this.connTransport === 0 || this.closed) return;
    this.probeTimer = setTimeout(() => this.startProbe(0), this.opts.upgradeInterval);
  }

  private startProbe(pi: number): void {
    this.probeTimer = undefined;
    if (this.closed || !this.conn || this.probe || pi >= this.connTransport) return;
    if (this.wanted().size === 0 && !this.isWs(pi)) {
      this.scheduleProbe();
      return;
    }
    const probe = this.spawn(pi, this.urls[this.ui]!);
    if (probe) this.probe = probe;
    else this.scheduleProbe();
  }

  // ---- delivery ----

  private deliver(m: HeraldMessage, from: Connection): void {
    const subs = this.subsFor(m.topic);
    const server = subs.length === 0 && (this.serverSets.get(from)?.has(m.topic) || m.topic === this.personal());
    if (subs.length === 0 && !server) return;
    if (!isAfter(m.id, this.cursors.get(m.topic))) return; // already delivered
    this.cursors.set(m.topic, m.id);
    this.hints.delete(m.topic);
    if (!this.named(m.topic)) this.touch(m.topic);
    if (subs.length === 0) {
      this.emit("serverMessage", m);
      return;
    }
    // Once to each handler, however many of its subscriptions (the topic's, patterns') match.
    const called = new Set<(m: HeraldMessage) => void>();
    for (const sub of subs) {
      if (!sub.active || called.has(sub.onMessage)) continue;
      called.add(sub.onMessage);
      try {
        sub.onMessage(m);
      } catch (e) {
        this.emit("error", e instanceof Error ? e : new Error(String(e)));
      }
    }
  }

  private position(topic: string, cursor: string): void {
    if (!this.ownTopic(topic) && !this.isServerTopic(topic)) return;
    if (isPattern(topic) || !parseCursor(cursor)) return;
    const current = this.cursors.get(topic);
    if (current === undefined) {
      this.cursors.set(topic, cursor);
    } else {
      const a = parseCursor(current);
      const b = parseCursor(cursor)!;
      if (a && a.epoch !== b.epoch) {
        this.hints.set(topic, cursor);
      } else if (isAfter(cursor, current)) {
        this.cursors.set(topic, cursor);
      }
    }
    // A topic a pattern resumed, or delivered on another connection: counted among the
    // pattern's topics (where it was, when it is there already).
    if (!this.named(topic) && !this.recent.has(topic)) this.touch(topic);
  }

  private onLostSignal(info: LostInfo, cursor: string | undefined): void {
    // A pattern's loss (the client fell behind its live stream): its topics' cursors stay,
    // as delivery goes on with what the stream still holds.
    const pattern = isPattern(info.topic);
    const subs = pattern ? [...(this.subs.get(info.topic) ?? [])] : this.subsFor(info.topic);
    if (subs.length === 0 && (pattern || !this.isServerTopic(info.topic))) return;
    if (!pattern) {
      const next = cursor ?? this.hints.get(info.topic);
      if (next !== undefined) this.cursors.set(info.topic, next);
      else this.cursors.delete(info.topic);
      this.hints.delete(info.topic);
      if (!this.named(info.topic)) this.touch(info.topic);
    }
    let handled = false;
    const called = new Set<(info: LostInfo) => void>();
    for (const sub of subs) {
      if (sub.active && sub.onLost && !called.has(sub.onLost)) {
        handled = true;
        called.add(sub.onLost);
        try {
          sub.onLost(info);
        } catch (e) {
          this.emit("error", e instanceof Error ? e : new Error(String(e)));
        }
      }
    }
    if (!handled) this.emit("lost", info);
  }

  // ---- patterns ----

  /** The first subscribed pattern that matches `topic`, if any. */
  private patternOf(topic: string): string | undefined {
    for (const p of this.patterns) if (matchesPattern(p, topic)) return p;
    return undefined;
  }

  /** Whether the client subscribed `topic` itself: by name or with a pattern. */
  private ownTopic(topic: string): boolean {
    return this.subs.has(topic) || this.patternOf(topic) !== undefined;
  }

  /** Whether `topic` has a cursor of its own, not as one of a pattern's topics: subscribed
   *  by name, or held by the application. */
  private named(topic: string): boolean {
    return this.subs.has(topic) || this.isServerTopic(topic);
  }

  /** The subscriptions a message of `topic` goes to: the topic's, then its patterns'. */
  private subsFor(topic: string): Sub[] {
    const out = [...(this.subs.get(topic) ?? [])];
    for (const p of this.patterns) if (matchesPattern(p, topic)) out.push(...this.subs.get(p)!);
    return out;
  }

  /** A topic a pattern delivered, now the most recent: past `MAX_PATTERN_TOPICS`, the least
   *  recent is forgotten (its cursor too, unless it has one of its own). */
  private touch(topic: string): void {
    this.recent.delete(topic);
    if (this.patternOf(topic) === undefined) return;
    this.recent.add(topic);
    while (this.recent.size > MAX_PATTERN_TOPICS) {
      const oldest = this.recent.values().next().value as string;
      this.recent.delete(oldest);
      if (!this.named(oldest)) this.forget(oldest);
    }
  }

  private forget(topic: string): void {
    this.cursors.delete(topic);
    this.hints.delete(topic);
  }

  // ---- tokens ----

  private setToken(token: string): void {
    this.token = token;
    clearTimeout(this.tokenTimer);
    const exp = tokenExpiry(token);
    if (exp === undefined || typeof this.options.token !== "function") return;
    const wait = Math.max(0, exp * 1000 - Date.now() - this.opts.tokenRefreshMargin);
    this.tokenTimer = setTimeout(() => {
      this.refreshToken()
        .then(() => {
          if (this.token) {
            this.conn?.refreshToken(this.token);
          }
        })
        .catch((e: unknown) => this.emit("error", e instanceof Error ? e : new Error(String(e))));
    }, Math.min(wait, 2 ** 31 - 1));
  }

  private refreshToken(): Promise<void> {
    const source = this.options.token;
    if (typeof source !== "function") {
      if (typeof source === "string") this.token = source;
      return Promise.resolve();
    }
    this.tokenPromise ??= (async () => {
      try {
        const t = await source();
        if (typeof t !== "string" || t === "") throw new TypeError("Herald: the token function gave no token");
        this.setToken(t);
      } finally {
        this.tokenPromise = undefined;
      }
    })();
    return this.tokenPromise;
  }

  // ---- events ----

  private setState(s: State): void {
    if (this._state === s) return;
    this._state = s;
    this.emit("state", s);
  }

  private emit<K extends keyof Events>(event: K, value: Events[K]): void {
    for (const fn of [...this.listeners[event]]) {
      try {
        fn(value);
      } catch {
        /* a listener's failure is its own */
      }
    }
  }
}

export default Herald;
