// The long-poll transport: `GET /v1/poll` again and again, each from the cursors the last
// answer gave.

import type { CloseInfo } from "./types.js";
import { HeraldError } from "./types.js";
import { formatResumeList, parseResumeList } from "./cursor.js";
import { matchedBy } from "./pattern.js";
import { ProtocolError, decodePollAnswer, type PollAnswer } from "./wire.js";
import { HttpConnection, MAX_ANSWER, headers, readText, refusal, topicQuery } from "./http.js";
import { Bases, DeltaError, pollMessageTexts } from "./delta.js";

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
      let body: PollAnswer;
      let text: string;
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
        text = await readText(res, MAX_ANSWER, "poll answer");
        if (!this.current(gen)) return;
        try {
          body = decodePollAnswer(text);
        } catch (e) {
          if (!(e instanceof ProtocolError)) throw e;
          // Not an answer the gateway gives: poll again from the cursors, and say so.
          this.fail({ reason: `poll: malformed answer: ${e.message}`, error: e });
          return;
        }
      } finally {
        clearTimeout(timer);
      }
      if (!this.current(gen)) return;
      const positions = body.cursor !== undefined ? parseResumeList(body.cursor) : new Map<string, string>();
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
      const messages = body.messages;
      const withMessages = new Set(messages.map((m) => m.topic));
      // After a loss, delivery goes on from the batch's end, or from its first message.
      for (const l of body.lost) {
        this.handlers.lost({ topic: l.topic, reason: l.reason }, withMessages.has(l.topic) ? undefined : positions.get(l.topic));
      }
      // Deltas apply within an answer (every poll is a resume: its first message of each topic
      // is full). A topic whose delta does not apply gets nothing more from this answer, and
      // its cursor stays at the last message delivered: the next poll resumes it from there.
      const bases = new Bases((t) => this.ctx.delta(t));
      const failed = new Set<string>();
      let texts: string[] | undefined;
      for (let k = 0; k < messages.length; k++) {
        const m = messages[k]!;
        if (failed.has(m.topic)) continue;
        try {
          if (bases.json(m, () => (texts ??= pollMessageTexts(text))[k] ?? "")) this.handlers.delta(m.topic);
        } catch (e) {
          if (!(e instanceof DeltaError)) throw e;
          failed.add(m.topic);
          this.handlers.delta(m.topic, e);
          if (!this.current(gen)) return;
          continue;
        }
        this.handlers.message(m);
        if (!this.current(gen)) return;
      }
      // The cursor is where the next poll goes on from (after the loss, after the batch).
      for (const [t, c] of positions) if (!failed.has(t)) this.handlers.position(t, c);
      first = false;
      this.markOpen();
      if (body.disconnect) {
        // The application ended this client's connection (admin API): as SSE
        // `herald.disconnect`; `reconnect: false` (logged out, banned) stops polling.
        const reason = body.disconnect.reason;
        const info: CloseInfo = { reason: `poll: disconnected: ${reason}` };
        if (!body.disconnect.reconnect) info.fatal = new HeraldError(0, "disconnected", reason);
        this.fail(info);
        return;
      }
    }
  }
}
