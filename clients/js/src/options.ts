// The public types of the `Herald` class's API: its options, its subscriptions and its
// events. (The types of messages, states and transports are in types.ts.)

import type { ConnectionContext, ConnectionHandlers, Connection, HeraldMessage, LostInfo, State, TransportName } from "./types.js";
import type { BackoffOptions } from "./backoff.js";

/** A token, or a function giving a fresh one (called again before the last one expires). */
export type TokenSource = string | (() => string | Promise<string>);

/** What `options.WebSocket` must be: the WHATWG `WebSocket`, or one like it (Node's `ws`). */
export interface WebSocketLike {
  readonly readyState: number;
  /** The subprotocol the server chose. */
  readonly protocol: string;
  binaryType: string;
  onopen: ((ev: any) => unknown) | null; // eslint-disable-line @typescript-eslint/no-explicit-any
  onmessage: ((ev: any) => unknown) | null; // eslint-disable-line @typescript-eslint/no-explicit-any
  onclose: ((ev: any) => unknown) | null; // eslint-disable-line @typescript-eslint/no-explicit-any
  onerror: ((ev: any) => unknown) | null; // eslint-disable-line @typescript-eslint/no-explicit-any
  send(data: string | ArrayBufferView | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  /** Drops the connection without a closing handshake (Node's `ws` has it), used for a
   *  connection given up as dead or malformed. */
  terminate?(): void;
}

/** A `WebSocket` constructor: the global one, or one like it. The client gives a third
 *  argument, `{ perMessageDeflate: false }` (unless `options.perMessageDeflate`), which Node's
 *  `ws` reads and the WHATWG one ignores. */
export type WebSocketConstructor = new (
  url: string,
  protocols?: string | string[],
  options?: { perMessageDeflate?: boolean },
) => WebSocketLike;

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
  /** A `WebSocket` constructor (default: the global one). Node 20 has none unless run with
   *  `--experimental-websocket`: pass one, e.g. `WebSocket` of the `ws` package; without
   *  any, the `websocket` transport is skipped and an `error` event says so. */
  WebSocket?: WebSocketConstructor;
  /** The WebSocket's format: `"json"` (default) or `"msgpack"`, the `herald.msgpack`
   *  subprotocol (binary frames; a payload published as MessagePack arrives as sent: `bin`
   *  as a `Uint8Array`, integers past 2^53 as `bigint`). SSE and long-poll read JSON. */
  format?: "json" | "msgpack";
  /** Ask the gateway for WebSocket batch frames (default `true`): `batch=1` on the WebSocket
   *  URL, and the gateway may pack the messages it has ready into one frame (a JSON array, or
   *  a MessagePack array), which the client unpacks, each message exactly as if it had come
   *  alone; far fewer frames to receive at high rates. Counted in `stats().batches`. `false`:
   *  one frame per message, as before. */
  batch?: boolean;
  /** Let the WebSocket offer permessage-deflate (default `false`). Applies to a constructor
   *  that takes options, as Node's `ws` does (it offers deflate unless told not to): the
   *  gateway does not batch a connection that took deflate (each message is compressed once
   *  and shared), and inflating each message cost a Node client ~35 % of its CPU per message
   *  at 10k msg/s. A browser's WebSocket always offers it and cannot be told not to: there the
   *  gateway sends single frames (the client takes both). */
  perMessageDeflate?: boolean;
  /** A connection that receives nothing (messages, replies, heartbeats) this long, in ms, is
   *  dead: it is given up and the client reconnects from its cursors (default 45000; 0:
   *  never). SSE asks the gateway for a heartbeat every half of it; a silent WebSocket is
   *  sent a `ping` halfway. */
  deadTimeout?: number;
  /** Cursors to start from, `{ topic: "<epoch>-<seq>" }` (e.g. `herald.cursors()` of an
   *  earlier client, kept by the application): a topic subscribed by name, or delivered by a
   *  pattern subscribed, resumes right after its cursor. */
  cursors?: Record<string, string>;
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
  /** `"fossil"`: ask for Fossil deltas on this topic (docs/protocol.md "Delta compression";
   *  its namespace must allow them, else the gateway refuses the subscription with
   *  `delta_not_allowed`). The client applies them: `onMessage` always gets the full data.
   *  WebSocket asks per topic; SSE and long-poll ask per connection, so only while every
   *  topic and pattern subscribed asks for them. A delta that does not apply is counted
   *  (`stats().deltaFailures`, an `error` event) and its topic is subscribed again from its
   *  cursor, so the message comes again in full. */
  delta?: "fossil";
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
