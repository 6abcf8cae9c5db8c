// What the two HTTP transports share: Server-Sent Events read with `fetch` (so that a token
// goes in the Authorization header and Node needs no EventSource), and long-polling. Both ask
// for the JSON form (`format=json`), in which every message names its topic, id, event and
// data. Publishing over HTTP (`POST /v1/publish`) too.

import type { Connection, ConnectionContext, ConnectionHandlers, CloseInfo } from "./types.js";
import { HeraldError, asError } from "./types.js";
import { ProtocolError, decodeHistory, type HistoryPage } from "./wire.js";

/** Longest poll answer or history page read, in characters (the gateway's own bound,
 *  `limits.max_answer_bytes`, is 1 MiB by default). */
export const MAX_ANSWER = 1 << 22;

/** A response's body as text, at most `max` characters (a `ProtocolError` past it). */
export async function readText(res: Response, max: number, what: string): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (text.length > max) {
      await reader.cancel().catch(() => {});
      throw new ProtocolError(`${what}: longer than ${max} characters`);
    }
  }
  return text + decoder.decode();
}

/** A refusal read from an error response: fatal for 4xx other than 408 and 429. */
export async function refusal(res: Response, what: string): Promise<CloseInfo> {
  let code = `http_${res.status}`;
  let reason = `${what} answered ${res.status}`;
  try {
    const body = (await res.json()) as { code?: unknown; reason?: unknown };
    if (typeof body.code === "string") code = body.code;
    if (typeof body.reason === "string") reason = body.reason;
  } catch {
    /* not JSON */
  }
  const info: CloseInfo = { reason: `${what}: ${res.status} ${code}: ${reason}` };
  const after = Number(res.headers.get("retry-after"));
  if (Number.isFinite(after) && after > 0) info.retryMs = after * 1000;
  if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
    info.fatal = new HeraldError(res.status, code, reason);
  }
  return info;
}

export function headers(ctx: ConnectionContext, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const token = ctx.token();
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

/** `topic=..&format=json`, and `last` when a topic without a cursor asks for it: one value
 *  applies to every topic without a cursor, so the largest asked for is sent. */
export function topicQuery(ctx: ConnectionContext, topics: Map<string, string | undefined>): URLSearchParams {
  const q = new URLSearchParams();
  let last: number | undefined;
  for (const [t, c] of topics) {
    q.append("topic", t);
    const n = c === undefined ? ctx.last(t) : undefined;
    if (n !== undefined && (last === undefined || n > last)) last = n;
  }
  if (last !== undefined) q.set("last", String(last));
  q.set("format", "json");
  // Deltas are asked for per request: only while every topic and pattern asks for them (a
  // topic that did not ask may be in a namespace that refuses them).
  if (topics.size > 0 && [...topics.keys()].every((t) => ctx.delta(t))) q.set("delta", "fossil");
  return q;
}
/** Publishes with `POST /v1/publish` on the gateway at `base` (a token or an API key). */
export async function publishOverHttp(
  base: string,
  message: { topic: string; data: unknown; event: string | undefined },
  auth: { token: string | undefined; apiKey: string | undefined },
  f: typeof fetch,
  credentials: RequestCredentials,
): Promise<{ id: string; topic: string }> {
  const body: Record<string, unknown> = { topic: message.topic, data: message.data };
  if (message.event !== undefined) body.event = message.event;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth.token) headers.authorization = `Bearer ${auth.token}`;
  if (auth.apiKey) headers["x-api-key"] = auth.apiKey;
  const res = await f(new URL("/v1/publish", base), {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    credentials,
  });
  if (!res.ok) {
    const info = await refusal(res, "publish");
    throw info.fatal ?? new HeraldError(res.status, `http_${res.status}`, info.reason);
  }
  return (await res.json()) as { id: string; topic: string };
}

/** A page of `topic`'s history (`GET /v1/topics/{topic}/history` on the gateway at `base`):
 *  the newest `limit` messages, or those after `since`. */
export async function historyOverHttp(
  base: string,
  topic: string,
  query: { limit?: number; since?: string },
  token: string | undefined,
  f: typeof fetch,
  credentials: RequestCredentials,
): Promise<HistoryPage> {
  const url = new URL(`/v1/topics/${encodeURIComponent(topic)}/history`, base);
  if (query.limit !== undefined) url.searchParams.set("limit", String(query.limit));
  if (query.since !== undefined) url.searchParams.set("since", query.since);
  const h: Record<string, string> = { accept: "application/json" };
  if (token) h.authorization = `Bearer ${token}`;
  const res = await f(url, { headers: h, cache: "no-store", credentials });
  if (!res.ok) {
    const info = await refusal(res, "history");
    throw info.fatal ?? new HeraldError(res.status, `http_${res.status}`, info.reason);
  }
  return decodeHistory(await readText(res, MAX_ANSWER, "history"));
}

/** Base of SSE and long-poll: one request at a time, restarted when the topics change. */
export abstract class HttpConnection implements Connection {
  abstract readonly transport: "sse" | "poll";
  protected closed = false;
  protected opened = false;
  protected abort: AbortController | undefined;
  /** Bumped on every (re)start; a request of an older generation reports nothing. */
  protected generation = 0;

  constructor(protected readonly ctx: ConnectionContext, protected readonly handlers: ConnectionHandlers) {
    queueMicrotask(() => this.restart());
  }

  update(): void {
    if (!this.closed) this.restart();
  }

  refreshToken(_token: string): void {
    /* read from ctx.token() by the next request */
  }

  close(): void {
    this.closed = true;
    this.abort?.abort();
  }

  protected restart(): void {
    if (this.closed) return;
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    const gen = ++this.generation;
    this.run(gen, abort.signal).catch((e: unknown) => {
      if (this.current(gen)) this.fail({ reason: `${this.transport}: ${asError(e).message}` });
    });
  }

  protected current(gen: number): boolean {
    return !this.closed && gen === this.generation;
  }

  protected markOpen(): void {
    if (this.opened) return;
    this.opened = true;
    this.handlers.open();
  }

  protected fail(info: CloseInfo): void {
    if (this.closed) return;
    this.closed = true;
    this.abort?.abort();
    this.handlers.close(info);
  }

  protected abstract run(gen: number, signal: AbortSignal): Promise<void>;
}
