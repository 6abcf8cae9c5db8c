// heraldpush (npm): the Herald push gateway's client for browsers and Node ≥ 20.
//
// One connection carries every subscription. It uses the first transport of
// `options.transports` that gets through (WebSocket, then SSE, then long-poll by default),
// falls back to the next when one cannot connect or is cut off at once, and tries the
// preferred one again every `upgradeInterval`. It keeps one cursor per topic and resumes
// from it on every reconnect, on every transport and on every node, so the application sees
// every message once and in order, or an explicit `onLost`. A prefix pattern (`orders.*`)
// subscribes to every matching topic: the client keeps a cursor for each topic it delivered
// (the most recent `MAX_PATTERN_TOPICS`) and resumes them under the pattern.
//
// Where things are: this file is the public class and the glue between its parts.
//   options.ts        its options, subscriptions and events (public types)
//   types.ts          messages, states, errors, and `Connection`: what a transport is
//   subscriptions.ts  the subscriptions and their cursors; delivery, once, in order
//   server.ts         topics the application subscribed the connection to; the personal topic
//   connector.ts      the connection's life: connect, fall back, reconnect, probe, upgrade
//   backoff.ts        reconnect delays, and which URL and transport come next
//   token.ts          the token: read, fetched, refreshed
//   events.ts         the listeners of `on`
//   transports.ts     makes a transport's connection: websocket.ts, sse.ts, poll.ts (the
//                     last two on http.ts), each with its dead-connection timer (watchdog.ts)
//   wire.ts           what the frames, events and answers say, read and checked, and the
//                     commands written (JSON, or MessagePack: msgpack.ts); a malformed one
//                     is a ProtocolError, which ends the connection (error event, reconnect)
//   cursor.ts, pattern.ts  cursors and resume lists; prefix patterns
// Keep src/ flat, with file names of a-z only: the gateway's browser tests serve dist/ as
// `/__client/<name>.js` (crates/gateway/tests/browser/harness.mjs) and serve nothing else.

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
import type {
  HeraldEvents,
  HeraldOptions,
  ServerTopics,
  ServerUnsubscribed,
  SubscribeOptions,
  Subscription,
  TokenSource,
  WebSocketConstructor,
  WebSocketLike,
} from "./options.js";
import { isTopicName } from "./cursor.js";
import { isPattern, subscriptionError } from "./pattern.js";
import { Reconnects } from "./backoff.js";
import { Emitter } from "./events.js";
import { TokenKeeper } from "./token.js";
import { Subscriptions, type Sub } from "./subscriptions.js";
import { ServerSubscriptions } from "./server.js";
import { Connector } from "./connector.js";
import { TRANSPORTS, openConnection } from "./transports.js";
import { historyOverHttp, publishOverHttp } from "./http.js";
import type { HistoryPage } from "./wire.js";

export type { HeraldMessage, LostInfo, State, TransportName, CloseInfo, Connection, ConnectionContext, ConnectionHandlers };
export { HeraldError };
export type { TokenSource, HeraldOptions, SubscribeOptions, ServerTopics, ServerUnsubscribed, Subscription, HeraldEvents };
export type { WebSocketConstructor, WebSocketLike, HistoryPage };
export { ProtocolError } from "./wire.js";
export { DeltaError, applyFossil, MAX_DELTA_TARGET } from "./delta.js";
export { MsgpackError, encode as encodeMsgpack, decode as decodeMsgpack } from "./msgpack.js";
export { parseCursor, parseResumeList, formatResumeList, isAfter, isTopicName } from "./cursor.js";
export { MAX_PATTERN_TOPICS, isPattern, matchesPattern, subscriptionError } from "./pattern.js";
export { fullJitter } from "./backoff.js";
export type { BackoffOptions } from "./backoff.js";
export { SseParser } from "./sse.js";
export { tokenExpiry, personalTopic } from "./token.js";

type Events = HeraldEvents;

export class Herald {
  private readonly opts: Required<
    Pick<
      HeraldOptions,
      "openTimeout" | "pollTimeout" | "maxTopics" | "credentials" | "format" | "deadTimeout" | "batch" | "perMessageDeflate"
    >
  >;
  private readonly events = new Emitter<Events>({
    state: new Set(),
    transport: new Set(),
    error: new Set(),
    lost: new Set(),
    serverSubscribe: new Set(),
    serverUnsubscribe: new Set(),
    serverMessage: new Set(),
  });
  private readonly tokens: TokenKeeper;
  private readonly subs: Subscriptions;
  private readonly server: ServerSubscriptions;
  private readonly link: Connector;

  constructor(url: string | string[], private readonly options: HeraldOptions = {}) {
    const urls = (Array.isArray(url) ? url : [url]).map((u) => new URL(u).toString());
    if (urls.length === 0) throw new TypeError("Herald: give at least one gateway URL");
    const wanted = options.transports ?? TRANSPORTS;
    for (const t of wanted) {
      if (!TRANSPORTS.includes(t)) throw new TypeError(`Herald: unknown transport ${JSON.stringify(t)}`);
    }
    const hasWs = !!(options.WebSocket ?? globalThis.WebSocket) || !!options.connect;
    const transports = wanted.filter((t) => t !== "websocket" || hasWs);
    if (transports.length === 0) throw new TypeError("Herald: no usable transport (no WebSocket here?)");
    const format = options.format ?? "json";
    if (format !== "json" && format !== "msgpack") throw new TypeError(`Herald: unknown format ${JSON.stringify(format)}`);
    for (const k of ["batch", "perMessageDeflate"] as const) {
      if (options[k] !== undefined && typeof options[k] !== "boolean") {
        throw new TypeError(`Herald: ${k} must be true or false, not ${String(options[k])}`);
      }
    }
    const deadTimeout = options.deadTimeout ?? 45000;
    if (!(typeof deadTimeout === "number" && deadTimeout >= 0)) {
      throw new RangeError(`Herald: deadTimeout must be a number of ms >= 0, not ${String(deadTimeout)}`);
    }
    this.opts = {
      openTimeout: options.openTimeout ?? 10000,
      pollTimeout: options.pollTimeout ?? 25,
      maxTopics: options.maxTopics ?? 64,
      credentials: options.credentials ?? "same-origin",
      format,
      deadTimeout,
      batch: options.batch ?? true,
      perMessageDeflate: options.perMessageDeflate ?? false,
    };
    // The parts call each other through these closures: each part is made before any runs.
    this.tokens = new TokenKeeper(
      options.token,
      options.tokenRefreshMargin ?? 30000,
      (token) => this.link.current?.refreshToken(token),
      (e) => this.events.emit("error", e),
    );
    this.subs = new Subscriptions((topic) => this.server.held(topic), this.events);
    if (options.cursors) this.subs.seed(Object.entries(options.cursors));
    this.server = new ServerSubscriptions(options.personalTopic, this.subs, this.tokens, this.events, () =>
      this.link.topicsChanged(),
    );
    this.link = new Connector({
      urls,
      transports,
      upgradeInterval: options.upgradeInterval ?? 30000,
      stableAfter: options.stableAfter ?? 5000,
      retry: new Reconnects(urls.length, transports.length, options.backoff ?? {}, options.random ?? Math.random),
      subs: this.subs,
      server: this.server,
      tokens: this.tokens,
      events: this.events,
      open: (transport, url, handlers) => this.open(transport, url, handlers),
    });
    if (options.personalTopic === "always") this.link.topicsChanged();
    if (transports.length < wanted.length) {
      // Not in silence: Node 20 has no WebSocket unless run with --experimental-websocket.
      queueMicrotask(() =>
        this.events.emit(
          "error",
          new Error(
            "Herald: no WebSocket here, so the websocket transport is skipped: pass options.WebSocket " +
              "(in Node 20, `WebSocket` of the `ws` package, or run node with --experimental-websocket)",
          ),
        ),
      );
    }
  }

  /** The connection's state. */
  get state(): State {
    return this.link.state;
  }

  /** The transport in use now (the last one that opened), if any. */
  get transport(): TransportName | undefined {
    return this.link.transport;
  }

  /** A topic's cursor: the id of the last message delivered, or its starting position (a
   *  topic a pattern delivered included). */
  cursor(topic: string): string | undefined {
    return this.subs.cursor(topic);
  }

  /** Every cursor the client holds, `{ topic: "<epoch>-<seq>" }`: the topics subscribed by
   *  name, those the application subscribed the connection to, those the patterns delivered
   *  (the most recent `MAX_PATTERN_TOPICS`). Kept by an application, it is `options.cursors`
   *  of a later client that resumes where this one stopped. */
  cursors(): Record<string, string> {
    return this.subs.all();
  }

  /** A page of a topic's history (`GET /v1/topics/{topic}/history` on the gateway, with the
   *  token): the newest `limit` messages (1..1000, default 100), or those after `since`,
   *  oldest first. The token must allow the topic (or the topic is public). */
  async history(topic: string, options: { limit?: number; since?: string } = {}): Promise<HistoryPage> {
    if (!isTopicName(topic)) throw new TypeError(`Herald: bad topic name ${JSON.stringify(topic)}`);
    if (options.limit !== undefined && !(Number.isInteger(options.limit) && options.limit >= 1 && options.limit <= 1000)) {
      throw new RangeError(`Herald: history limit must be a whole number from 1 to 1000, not ${String(options.limit)}`);
    }
    if (this.tokens.missing) await this.tokens.refresh();
    return historyOverHttp(this.link.url, topic, options, this.tokens.current, this.fetch(), this.opts.credentials);
  }

  /** The topics whose messages go to `serverMessage` listeners: those the application
   *  subscribed the connection to (and the kept personal topic), less those the client
   *  subscribed itself. */
  get serverTopics(): string[] {
    return this.server.list(this.link.current);
  }

  /** Listens to `state`, `transport`, `error` (a refusal, a failed attempt), `lost` (loss
   *  signals of subscriptions without `onLost`), `serverSubscribe` / `serverUnsubscribe`
   *  (the application subscribed the connection to topics, or they ended) and
   *  `serverMessage` (messages of those topics). Listening to `serverMessage` opens a
   *  WebSocket even without a subscription. Returns a function that stops listening. */
  on<K extends keyof Events>(event: K, fn: (v: Events[K]) => void): () => void {
    this.events.on(event, fn);
    if (event === "serverMessage") this.link.topicsChanged();
    return () => this.off(event, fn);
  }

  off<K extends keyof Events>(event: K, fn: (v: Events[K]) => void): void {
    this.events.off(event, fn);
  }

  /** Subscribes `onMessage` to `topic`, or to every topic a prefix pattern such as
   *  `orders.*` matches. Many subscriptions share one connection. */
  subscribe(topic: string, onMessage: (m: HeraldMessage) => void, options: SubscribeOptions = {}): Subscription {
    if (this.link.closed) throw new Error("Herald: subscribe after close()");
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
    if (options.delta !== undefined && options.delta !== "fossil") {
      throw new TypeError(`Herald: unknown delta ${JSON.stringify(options.delta)} (only "fossil")`);
    }
    const sub: Sub = {
      topic,
      onMessage,
      onLost: options.onLost,
      last: options.last,
      delta: options.delta === "fossil",
      active: true,
    };
    if (this.subs.add(sub, this.opts.maxTopics)) this.link.topicsChanged();
    return {
      topic,
      unsubscribe: () => {
        if (this.subs.remove(sub)) this.link.topicsChanged();
      },
    };
  }

  /** Publishes: over the WebSocket when it is open (the token's `publish` claim must allow
   *  the topic), else with `POST /v1/publish` on the gateway (a token or `apiKey`). */
  async publish(topic: string, data: unknown, options: { event?: string } = {}): Promise<{ id: string; topic: string }> {
    if (!isTopicName(topic)) throw new TypeError(`Herald: bad topic name ${JSON.stringify(topic)}`);
    if (this.tokens.missing) await this.tokens.refresh();
    const conn = this.link.current;
    if (conn?.publish && this.link.state === "open") return conn.publish(topic, data, options.event);
    return publishOverHttp(
      this.link.url,
      { topic, data, event: options.event },
      { token: this.tokens.current, apiKey: this.options.apiKey },
      this.fetch(),
      this.opts.credentials,
    );
  }

  /** Counters: `deltas`, the deltas applied; `deltaFailures`, those that could not be (each
   *  also an `error` event), whose topics were subscribed again from their cursors;
   *  `batches`, the WebSocket batch frames received (`options.batch`). */
  stats(): { deltas: number; deltaFailures: number; batches: number } {
    return { ...this.link.stats };
  }

  /** Closes the connection for good. */
  close(): void {
    this.link.close();
  }

  /** A connection of `transport` to `url`: a built-in transport, or `options.connect`'s. */
  private open(transport: TransportName, url: string, handlers: ConnectionHandlers): Connection {
    const ctx: ConnectionContext = {
      url,
      topics: () => this.subs.resume(this.server.wanted()),
      patternCursors: () => this.subs.patternCursors(this.server.wanted()),
      last: (topic) => this.subs.last(topic),
      delta: (topic) => this.subs.delta(topic),
      token: () => this.tokens.current,
      fetch: this.fetch(),
      // A constructor like the WHATWG one (Node's `ws`) is used as one.
      WebSocket: (this.options.WebSocket ?? globalThis.WebSocket) as typeof WebSocket | undefined,
      format: this.opts.format,
      batch: this.opts.batch,
      perMessageDeflate: this.opts.perMessageDeflate,
      deadTimeout: this.opts.deadTimeout,
      credentials: this.opts.credentials,
      openTimeout: this.opts.openTimeout,
      pollTimeout: this.opts.pollTimeout,
    };
    if (this.options.connect) return this.options.connect(transport, ctx, handlers);
    return openConnection(transport, ctx, handlers);
  }

  private fetch(): typeof fetch {
    return this.options.fetch ?? globalThis.fetch.bind(globalThis);
  }
}

export default Herald;
