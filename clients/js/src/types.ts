// The public types of the client.

/** A transport, in the order a client may try them. */
export type TransportName = "websocket" | "sse" | "poll";

/** The connection's state, as `state` events report it. */
export type State = "connecting" | "open" | "reconnecting" | "closed";

/** A message as the application sees it, on every transport. */
export interface HeraldMessage {
  /** The topic it was published to (`orders.eu`, also when a pattern such as `orders.*`
   *  delivered it). */
  topic: string;
  /** Its position in the topic's stream, `<epoch>-<seq>`: the id the publish API returned. */
  id: string;
  /** The event name the publisher gave; absent for unnamed messages. */
  event?: string;
  /** The published JSON value. */
  data: unknown;
}

/** Why messages were lost: the gateway's loss signal. */
export interface LostInfo {
  /** The topic; a pattern (`orders.*`) when the client fell behind the pattern's live
   *  stream as a whole (`lagged`), not knowing which of its topics it missed. */
  topic: string;
  /** `expired` (older than the history kept), `epoch` (another life of the stream, e.g. a
   *  restarted node with in-memory history), `lagged` (the client fell too far behind). */
  reason: string;
}

/** A refusal the client does not retry (a 4xx other than 408 and 429). */
export class HeraldError extends Error {
  constructor(
    /** HTTP status (0 when the refusal came in a WebSocket frame). */
    readonly status: number,
    /** The gateway's stable error code (`forbidden`, `bad_topic`, `invalid_token`, ...). */
    readonly code: string,
    /** The gateway's reason, for people. */
    readonly reason: string,
  ) {
    super(`${code}: ${reason}${status ? ` (HTTP ${status})` : ""}`);
    this.name = "HeraldError";
  }
}

/** `e` as an `Error` (what was thrown may be anything). */
export function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

/** How a connection ended, as a transport reports it to the client. */
export interface CloseInfo {
  /** For logs and `error` events. */
  reason: string;
  /** Reconnect after this many ms (the server's `retry:`, `herald.shutdown`, `retry-after`). */
  retryMs?: number;
  /** The node is draining or restarting (close 1012, `herald.shutdown`): not the transport's fault. */
  shutdown?: boolean;
  /** The token expired: refresh it before reconnecting. */
  tokenExpired?: boolean;
  /** A refusal not to retry. */
  fatal?: HeraldError;
  /** The error the `error` event reports (default: an `Error` with `reason`), e.g. a
   *  `ProtocolError` for a malformed frame. */
  error?: Error;
}

/** What a transport reports to the client. Nothing is called after `close` or after the
 *  connection was closed by the client. */
export interface ConnectionHandlers {
  /** The connection is subscribed and delivering. */
  open(): void;
  message(m: HeraldMessage): void;
  /** A loss signal; `cursor`, when given, is where delivery continues. */
  lost(info: LostInfo, cursor?: string): void;
  /** A topic's starting position (`subscribed` cursors, the SSE opening id, the poll cursor),
   *  a topic a pattern delivered included. */
  position(topic: string, cursor: string): void;
  /** The application subscribed this connection to topics it did not ask for (WebSocket
   *  `subscribed` with `"by": "server"`, SSE `herald.subscribed`, a connect hook's topics in
   *  the SSE opening id or the poll cursor). Reported before their positions and messages. */
  serverSubscribed(topics: string[]): void;
  /** Topics the application had subscribed this connection to are gone: unsubscribed by the
   *  application (`ended` false), or the transport started a new connection on the gateway
   *  (an SSE stream restarted for a topic change), which the server does not carry them to
   *  (`ended` true). */
  serverUnsubscribed(topics: string[], ended: boolean): void;
  /** A delta was applied (`error` undefined), or one could not be (its topic is subscribed
   *  again from its cursor by the transport: nothing of it was delivered). */
  delta(topic: string, error?: Error): void;
  /** A WebSocket batch frame came (several frames in one); its elements follow as they would
   *  alone (`message`, `lost`, ...). */
  batch(): void;
  close(info: CloseInfo): void;
}

/** What the client gives a transport. */
export interface ConnectionContext {
  /** The gateway's base URL (`https://push.example.com`). */
  url: string;
  /** The subscribed topics and patterns (`orders.*`, never with a cursor), and each
   *  topic's cursor, read at the moment of (re)subscribing. */
  topics(): Map<string, string | undefined>;
  /** The cursors of topics the subscribed patterns delivered (not subscribed by name): sent
   *  with the patterns (WebSocket `cursors`, SSE `Last-Event-ID`, the poll `cursor`) so that
   *  they resume under them. At most `MAX_PATTERN_TOPICS`, the least recent first. */
  patternCursors(): Map<string, string>;
  /** For a topic without a cursor: start with its newest `last` messages (undefined: live). */
  last(topic: string): number | undefined;
  /** Whether a subscription of `topic` (or pattern) asked for deltas (`delta: "fossil"`). */
  delta(topic: string): boolean;
  /** The current token, if any. */
  token(): string | undefined;
  /** `fetch` to use. */
  fetch: typeof fetch;
  /** `WebSocket` constructor to use. */
  WebSocket: typeof WebSocket | undefined;
  /** The WebSocket's format: JSON, or MessagePack (`herald.msgpack`). SSE and long-poll
   *  always read JSON. */
  format: "json" | "msgpack";
  /** Ask for WebSocket batch frames (`?batch=1`). */
  batch: boolean;
  /** Let a WebSocket constructor that takes options (Node's `ws`) offer permessage-deflate. */
  perMessageDeflate: boolean;
  /** A connection that receives nothing for this long, in ms, is dead (0: never). */
  deadTimeout: number;
  /** Credentials mode of fetches (cookies). */
  credentials: RequestCredentials;
  /** Longest wait for a connection to open, in ms. */
  openTimeout: number;
  /** Seconds a long-poll may be held. */
  pollTimeout: number;
}

/** One connection of one transport. */
export interface Connection {
  readonly transport: TransportName;
  /** The topic set or cursors changed: subscribe/unsubscribe (WebSocket) or reconnect. */
  update(): void;
  /** A fresh token (WebSocket: an `auth` frame; SSE: reconnect; poll: used by the next poll). */
  refreshToken(token: string): void;
  /** Publishes over this connection, when the transport can. */
  publish?(topic: string, data: unknown, event?: string): Promise<{ id: string; topic: string }>;
  /** Ends the connection; no handler is called after. */
  close(): void;
}
