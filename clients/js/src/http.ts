// The HTTP transports: Server-Sent Events read with `fetch` (so that a token goes in the
// Authorization header and Node needs no EventSource), and long-polling. Both ask for the JSON
// form (`format=json`), in which every message names its topic, id, event and data.

import type { Connection, ConnectionContext, ConnectionHandlers, CloseInfo, HeraldMessage } from "./types.js";
import { HeraldError } from "./types.js";
import { formatResumeList, parseResumeList } from "./cursor.js";
import { SseParser } from "./sse.js";
import { matchedBy } from "./pattern.js";

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

function headers(ctx: ConnectionContext, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const token = ctx.token();
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

/** `topic=..&format=json`, and `last` when a topic without a cursor asks for it: one value
 *  applies to every topic without a cursor, so the largest asked for is sent. */
function topicQuery(ctx: ConnectionContext, topics: Map<string, string | undefined>): URLSearchParams {
  const q = new URLSearchParams();
  let last: number | undefined;
  for (const [t, c] of topics) {
    q.append("topic", t);
    const n = c === undefined ? ctx.last(t) : undefined;
    if (n !== undefined && (last === undefined || n > last)) last = n;
  }
  if (last !== undefined) q.set("last", String(last));
  q.set("format", "json");
  return q;
}

/** A message object of the JSON form (`{"type":"message","topic",..}`), or undefined. */
function toMessage(f: unknown): HeraldMessage | undefined {
  if (typeof f !== "object" || f === null) return undefined;
  const o = f as Record<string, unknown>;
  if (o.type !== "message" || typeof o.topic !== "string" || typeof o.id !== "string") return undefined;
  const m: HeraldMessage = { topic: o.topic, id: o.id, data: o.data };
  if (typeof o.event === "string") m.event = o.event;
  return m;
}

/** The `topics` of a `{"topics": [..]}` event (`herald.subscribed`, `herald.unsubscribed`). */
function topicsOf(data: string): string[] {
  try {
    const v = (JSON.parse(data) as { topics?: unknown }).topics;
    return Array.isArray(v) ? v.filter((t): t is string => typeof t === "string") : [];
  } catch {
    return [];
  }
}

/** Base of the two: one request at a time, restarted when the topics change. */
abstract class HttpConnection implements Connection {
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
      if (this.current(gen)) this.fail({ reason: `${this.transport}: ${e instanceof Error ? e.message : String(e)}` });
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

export class SseConnection extends HttpConnection {
  readonly transport = "sse" as const;
  /** Topics the current stream was asked for. */
  private asked = new Set<string>();
  /** Topics the application subscribed the current stream to (`herald.subscribed`, a
   *  connect hook's topics in the opening id). */
  private byServer = new Set<string>();

  override refreshToken(_token: string): void {
    // The stream's token was checked when it opened: reconnect with the new one (exactly,
    // from the cursors).
    this.restart();
  }

  override update(): void {
    if (this.closed) return;
    // A new stream is a new connection on the gateway, which loses what the application
    // subscribed this one to: restart only when the topics the client wants changed.
    const wanted = this.ctx.topics();
    const held = (t: string) => this.asked.has(t) || this.byServer.has(t);
    if ([...wanted.keys()].every(held) && [...this.asked].every((t) => wanted.has(t))) return;
    this.restart();
  }

  /** Topics named by the server that this stream did not ask for and did not know (those
   *  its patterns deliver are the client's own). */
  private serverNew(topics: Iterable<string>): string[] {
    const added = [...topics].filter((t) => !this.asked.has(t) && !this.byServer.has(t) && !matchedBy(this.asked, t));
    for (const t of added) this.byServer.add(t);
    return added;
  }

  protected async run(gen: number, signal: AbortSignal): Promise<void> {
    const topics = this.ctx.topics();
    // What the application subscribed the previous stream to ends with it.
    const ended = [...this.byServer].filter((t) => !topics.has(t));
    this.byServer.clear();
    this.asked = new Set(topics.keys());
    if (ended.length > 0) this.handlers.serverUnsubscribed(ended, true);
    if (!this.current(gen)) return;
    const url = new URL(`/v1/sse?${topicQuery(this.ctx, topics)}`, this.ctx.url);
    // The topics' cursors, and those of the topics the patterns delivered.
    const resume = formatResumeList([...topics, ...this.ctx.patternCursors()]);
    let openTimer: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
      if (this.current(gen)) this.fail({ reason: `sse: no opening block within ${this.ctx.openTimeout} ms (buffered by a proxy?)` });
    }, this.ctx.openTimeout);
    const stopTimer = () => {
      clearTimeout(openTimer);
      openTimer = undefined;
    };
    try {
      const res = await this.ctx.fetch(url, {
        headers: headers(this.ctx, resume ? { accept: "text/event-stream", "last-event-id": resume } : { accept: "text/event-stream" }),
        cache: "no-store",
        credentials: this.ctx.credentials,
        signal,
      });
      if (!this.current(gen)) return;
      if (!res.ok || !res.body) {
        stopTimer();
        this.fail(await refusal(res, "sse"));
        return;
      }
      let retryMs: number | undefined;
      let sawOpening = false;
      let ending: CloseInfo | undefined;
      const parser = new SseParser({
        id: (id) => {
          if (!this.current(gen)) return;
          const positions = parseResumeList(id);
          // Topics in the opening id the stream did not ask for: a connect hook's.
          const added = this.serverNew(positions.keys());
          if (added.length > 0) this.handlers.serverSubscribed(added);
          for (const [t, c] of positions) this.handlers.position(t, c);
          if (!sawOpening) {
            sawOpening = true;
            stopTimer();
            this.markOpen();
          }
        },
        retry: (ms) => {
          // The opening `retry:` is EventSource's default; one sent later ends the stream.
          if (sawOpening) retryMs = ms;
        },
        event: (e) => {
          if (!this.current(gen)) return;
          switch (e.event) {
            case "message": {
              let f: unknown;
              try {
                f = JSON.parse(e.data);
              } catch {
                return;
              }
              const m = toMessage(f);
              if (m) this.handlers.message(m);
              break;
            }
            case "herald.lost": {
              const lost = JSON.parse(e.data) as { topic: string; reason: string };
              const positions = e.id !== undefined ? parseResumeList(e.id) : new Map<string, string>();
              this.handlers.lost({ topic: lost.topic, reason: lost.reason }, positions.get(lost.topic));
              for (const [t, c] of positions) if (t !== lost.topic) this.handlers.position(t, c);
              break;
            }
            case "herald.subscribed": {
              const added = this.serverNew(topicsOf(e.data));
              if (added.length > 0) this.handlers.serverSubscribed(added);
              // The id names every topic's position, the new ones' included.
              if (e.id !== undefined) for (const [t, c] of parseResumeList(e.id)) this.handlers.position(t, c);
              break;
            }
            case "herald.unsubscribed": {
              const removed = topicsOf(e.data);
              for (const t of removed) {
                this.byServer.delete(t);
                this.asked.delete(t);
              }
              // A topic the client still wants is asked for again (a new stream) by update().
              if (removed.length > 0) this.handlers.serverUnsubscribed(removed, false);
              break;
            }
            case "herald.shutdown": {
              const s = JSON.parse(e.data) as { retry_ms?: number };
              ending = { reason: "sse: the node is draining", shutdown: true };
              if (typeof s.retry_ms === "number") ending.retryMs = s.retry_ms;
              break;
            }
            case "herald.disconnect": {
              const d = JSON.parse(e.data) as { reason?: string; reconnect?: boolean };
              ending = { reason: `sse: disconnected: ${d.reason ?? "unknown"}` };
              if (d.reason === "token expired") ending.tokenExpired = true;
              // Ended by the application with "stay away" (logged out, banned): no reconnect.
              if (d.reconnect === false) ending.fatal = new HeraldError(0, "disconnected", d.reason ?? "disconnected");
              break;
            }
            default:
              break;
          }
        },
      });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (!this.current(gen)) {
          await reader.cancel().catch(() => {});
          return;
        }
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
      }
      stopTimer();
      if (!this.current(gen)) return;
      const info: CloseInfo = ending ?? { reason: "sse: the stream ended" };
      if (info.retryMs === undefined && retryMs !== undefined) info.retryMs = retryMs;
      this.fail(info);
    } finally {
      stopTimer();
    }
  }
}

export class PollConnection extends HttpConnection {
  readonly transport = "poll" as const;
  /** Positions of topics the polls did not ask for but the answers named (a connect hook's):
   *  sent back in `cursor` so that the next poll goes on from them. */
  private byServer = new Map<string, string>();
  /** Topics the current poll asked for. */
  private asked = new Set<string>();

  override update(): void {
    if (this.closed) return;
    // The next poll reads the cursors anyway: restart only for another set of topics.
    const wanted = this.ctx.topics();
    if (wanted.size === this.asked.size && [...wanted.keys()].every((t) => this.asked.has(t))) return;
    this.restart();
  }

  protected async run(gen: number, signal: AbortSignal): Promise<void> {
    let first = true;
    while (this.current(gen)) {
      const topics = this.ctx.topics();
      this.asked = new Set(topics.keys());
      const q = topicQuery(this.ctx, topics);
      q.set("timeout", first ? "0" : String(this.ctx.pollTimeout));
      // The topics' cursors, then those of the topics the patterns delivered and of the
      // server's topics.
      const cursors = new Map(topics);
      for (const [t, c] of [...this.ctx.patternCursors(), ...this.byServer]) if (!cursors.has(t)) cursors.set(t, c);
      const resume = formatResumeList(cursors);
      if (resume) q.set("cursor", resume);
      const url = new URL(`/v1/poll?${q}`, this.ctx.url);
      const limit = (first ? 0 : this.ctx.pollTimeout * 1000) + this.ctx.openTimeout;
      const timer = setTimeout(() => {
        if (this.current(gen)) this.fail({ reason: `poll: no answer within ${limit} ms` });
      }, limit);
      let res: Response;
      let body: {
        messages?: unknown[];
        lost?: { topic: string; reason: string }[];
        cursor?: string;
        disconnect?: { reason?: unknown; reconnect?: unknown };
      };
      try {
        res = await this.ctx.fetch(url, {
          headers: headers(this.ctx, { accept: "application/json" }),
          cache: "no-store",
          credentials: this.ctx.credentials,
          signal,
        });
        if (!this.current(gen)) return;
        if (!res.ok) {
          this.fail(await refusal(res, "poll"));
          return;
        }
        body = (await res.json()) as typeof body;
      } finally {
        clearTimeout(timer);
      }
      if (!this.current(gen)) return;
      const positions = typeof body.cursor === "string" ? parseResumeList(body.cursor) : new Map<string, string>();
      // Topics of the answer the poll did not ask for, nor its patterns deliver: a connect
      // hook's (they come and go with it).
      const own = (t: string) => topics.has(t) || matchedBy(topics.keys(), t);
      const added: string[] = [];
      const gone: string[] = [];
      for (const [t, c] of positions) {
        if (own(t)) continue;
        if (!this.byServer.has(t)) added.push(t);
        this.byServer.set(t, c);
      }
      for (const t of [...this.byServer.keys()]) {
        if (own(t)) this.byServer.delete(t); // asked for by the client now
        else if (!positions.has(t)) gone.push(t);
      }
      for (const t of gone) this.byServer.delete(t);
      if (gone.length > 0) this.handlers.serverUnsubscribed(gone, false);
      if (added.length > 0) this.handlers.serverSubscribed(added);
      if (!this.current(gen)) return;
      const messages = (body.messages ?? []).map(toMessage).filter((m): m is HeraldMessage => m !== undefined);
      const withMessages = new Set(messages.map((m) => m.topic));
      // After a loss, delivery goes on from the batch's end, or from its first message.
      for (const l of body.lost ?? []) {
        this.handlers.lost({ topic: l.topic, reason: l.reason }, withMessages.has(l.topic) ? undefined : positions.get(l.topic));
      }
      for (const m of messages) {
        this.handlers.message(m);
        if (!this.current(gen)) return;
      }
      // The cursor is where the next poll goes on from (after the loss, after the batch).
      for (const [t, c] of positions) this.handlers.position(t, c);
      first = false;
      this.markOpen();
      if (body.disconnect && typeof body.disconnect === "object") {
        // The application ended this client's connection (admin API): as SSE
        // `herald.disconnect`; `reconnect: false` (logged out, banned) stops polling.
        const reason = typeof body.disconnect.reason === "string" ? body.disconnect.reason : "disconnected";
        const info: CloseInfo = { reason: `poll: disconnected: ${reason}` };
        if (body.disconnect.reconnect === false) info.fatal = new HeraldError(0, "disconnected", reason);
        this.fail(info);
        return;
      }
    }
  }
}
