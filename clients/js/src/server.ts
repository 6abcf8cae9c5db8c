// Server-side subscriptions: topics the application subscribed a connection to (admin API, a
// send, a connect hook), whose messages go to `serverMessage` listeners, and the personal
// topic `user:<sub>` that the client keeps across connections (`personalTopic`).

import type { Connection } from "./types.js";
import { isTopicName } from "./cursor.js";
import type { HeraldEvents, HeraldOptions } from "./options.js";
import type { Emitter } from "./events.js";
import type { Subscriptions } from "./subscriptions.js";
import { personalTopic, type TokenKeeper } from "./token.js";

export class ServerSubscriptions {
  /** Topics the application subscribed each live connection to (the connection's and the
   *  probe's), as the connection reported them. */
  private readonly sets = new Map<Connection, Set<string>>();
  /** The personal topic is kept across connections (`personalTopic`). */
  private keepPersonal: boolean;

  constructor(
    private readonly mode: HeraldOptions["personalTopic"],
    private readonly subs: Subscriptions,
    private readonly tokens: TokenKeeper,
    private readonly events: Emitter<HeraldEvents>,
    /** The topics the client asks for changed. */
    private readonly changed: () => void,
  ) {
    this.keepPersonal = mode === "always";
  }

  /** The kept personal topic, if any (from the current token's `sub`). */
  personal(): string | undefined {
    if (!this.keepPersonal || this.mode === "off" || !this.tokens.current) return undefined;
    return personalTopic(this.tokens.current);
  }

  /** The personal topic is kept but the token that names it is not fetched yet. */
  personalPending(): boolean {
    return this.keepPersonal && this.mode !== "off" && this.tokens.missing;
  }

  /** The topics the client subscribes itself: its subscriptions and the kept personal topic. */
  wanted(): Set<string> {
    const out = new Set(this.subs.names());
    const personal = this.personal();
    if (personal) out.add(personal);
    return out;
  }

  /** Whether the application holds `topic`: on any live connection, or the kept personal one. */
  held(topic: string): boolean {
    if (topic === this.personal()) return true;
    for (const set of this.sets.values()) if (set.has(topic)) return true;
    return false;
  }

  /** Whether a message of `topic` from `conn` goes to `serverMessage` listeners. */
  carries(conn: Connection, topic: string): boolean {
    return this.sets.get(conn)?.has(topic) || topic === this.personal();
  }

  /** The topics for `serverMessage` listeners on `conn`, less those the client subscribed. */
  list(conn: Connection | undefined): string[] {
    const out = new Set<string>(conn ? this.sets.get(conn) : undefined);
    const personal = this.personal();
    if (personal) out.add(personal);
    return [...out].filter((t) => !this.subs.ownTopic(t));
  }

  /** A connection reports topics the application subscribed it to (`main`: the connection,
   *  not a probe, whose topics the application is told of when it takes over). */
  subscribed(conn: Connection, topics: string[], main: boolean): void {
    let set = this.sets.get(conn);
    if (!set) this.sets.set(conn, (set = new Set()));
    const added = topics.filter((t) => isTopicName(t) && !set.has(t));
    for (const t of added) set.add(t);
    const personal = this.tokens.current ? personalTopic(this.tokens.current) : undefined;
    let keep = false;
    if (personal && added.includes(personal) && !this.keepPersonal && this.mode !== "off") {
      this.keepPersonal = true;
      keep = true;
    }
    if (main) {
      const told = added.filter((t) => !this.subs.ownTopic(t));
      if (told.length > 0) this.events.emit("serverSubscribe", { topics: told });
    }
    // The kept personal topic joins the topics the client asks for (a no-op on this
    // connection, which holds it already).
    if (keep) this.changed();
  }

  /** A connection reports topics the application dropped, or that its new stream lost. */
  unsubscribed(conn: Connection, topics: string[], ended: boolean, main: boolean): void {
    const set = this.sets.get(conn);
    const removed = topics.filter((t) => set?.has(t) || (!ended && t === this.personal()));
    for (const t of removed) set?.delete(t);
    if (!ended && this.personal() !== undefined && removed.includes(this.personal()!)) this.keepPersonal = false;
    if (main) this.gone(removed, ended ? "connection" : "server");
    // The client's own subscriptions to a topic the application dropped are asked for again.
    if (!ended) this.changed();
  }

  /** A probe took over from `old`: what the application subscribed `old` to and not `next`
   *  ends; what it subscribed the probe to (a connect hook), it is told now. */
  replaced(old: Connection | undefined, next: Connection): void {
    const before = old ? this.sets.get(old) : undefined;
    if (old) this.ended(old, next);
    const fresh = [...(this.sets.get(next) ?? [])].filter((t) => !before?.has(t) && !this.subs.ownTopic(t));
    if (fresh.length > 0) this.events.emit("serverSubscribe", { topics: fresh });
  }

  /** A connection ended, or was replaced by `next`: what the application had subscribed it
   *  to ends with it (the gateway does not carry it over). */
  ended(conn: Connection, next?: Connection): void {
    const set = this.sets.get(conn);
    this.sets.delete(conn);
    if (!set) return;
    const carried = next ? this.sets.get(next) : undefined;
    const lost = [...set].filter((t) => !carried?.has(t));
    this.gone(lost, "connection");
  }

  /** A probe ended before it took over: its topics go, untold. */
  discard(conn: Connection): void {
    this.sets.delete(conn);
  }

  /** The client closed. */
  clear(): void {
    this.sets.clear();
  }

  /** Topics no longer subscribed by the application: their cursors go unless the client
   *  holds them itself; the application is told. */
  private gone(topics: string[], reason: "server" | "connection"): void {
    const wanted = this.wanted();
    const gone = topics.filter((t) => !wanted.has(t));
    for (const t of gone) {
      if (this.held(t)) continue;
      // A topic a pattern delivers keeps its cursor, as the pattern's.
      if (this.subs.patternOf(t) !== undefined) this.subs.touch(t);
      else this.subs.forget(t);
    }
    const told = gone.filter((t) => !this.subs.ownTopic(t));
    if (told.length > 0) this.events.emit("serverUnsubscribe", { topics: told, reason });
  }
}
