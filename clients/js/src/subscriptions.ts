// The application's subscriptions (topics and patterns) and the cursors the client resumes
// from: one per topic subscribed by name or held by the application, and one for each topic
// a pattern delivered (the most recent `MAX_PATTERN_TOPICS`). Messages and loss signals go
// through here, to each handler once, moving the cursors forward only.

import type { HeraldMessage, LostInfo } from "./types.js";
import { asError } from "./types.js";
import type { HeraldEvents } from "./options.js";
import type { Emitter } from "./events.js";
import { isAfter, isTopicName, parseCursor } from "./cursor.js";
import { MAX_PATTERN_TOPICS, isPattern, matchesPattern } from "./pattern.js";

/** One `subscribe` call. */
export interface Sub {
  /** A topic, or a pattern (`orders.*`). */
  topic: string;
  onMessage: (m: HeraldMessage) => void;
  onLost: ((info: LostInfo) => void) | undefined;
  last: number | undefined;
  /** Asked for deltas (`delta: "fossil"`). */
  delta: boolean;
  active: boolean;
}

export class Subscriptions {
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
  /** Topics whose cursor was given to start from and that no subscription has taken yet
   *  (a pattern subscribed later takes those it matches as its topics). */
  private readonly seeded = new Set<string>();

  constructor(
    /** Whether the application holds `topic` (a server-side subscription, the kept personal
     *  topic): it keeps a cursor of its own. */
    private readonly held: (topic: string) => boolean,
    private readonly events: Emitter<HeraldEvents>,
  ) {}

  /** The topics and patterns subscribed. */
  names(): IterableIterator<string> {
    return this.subs.keys();
  }

  /** A topic's cursor, if any. */
  cursor(topic: string): string | undefined {
    return this.cursors.get(topic);
  }

  /** Every cursor held: topics subscribed by name, held by the application, delivered by a
   *  pattern, or given to start from and not subscribed yet. */
  all(): Record<string, string> {
    return Object.fromEntries(this.cursors);
  }

  /** Cursors to start from (saved from an earlier client's `cursors()`): a topic subscribed
   *  later, by name or through a pattern, resumes after it. Entries that are not a topic
   *  name and a cursor are refused with a `TypeError`. */
  seed(cursors: Iterable<[string, string]>): void {
    for (const [topic, cursor] of cursors) {
      if (!isTopicName(topic) || isPattern(topic) || !parseCursor(cursor)) {
        throw new TypeError(`Herald: bad start cursor ${JSON.stringify(topic)}: ${JSON.stringify(cursor)}`);
      }
      this.cursors.set(topic, cursor);
      this.seeded.add(topic);
    }
  }

  /** Adds a subscription; true when its topic or pattern is new (the connection changes).
   *  Past `maxTopics` topics and patterns, a new one is refused. */
  add(sub: Sub, maxTopics: number): boolean {
    const topic = sub.topic;
    let set = this.subs.get(topic);
    const fresh = !set;
    if (!set) {
      if (this.subs.size >= maxTopics) {
        throw new RangeError(`Herald: at most ${maxTopics} topics per connection`);
      }
      set = new Set();
      this.subs.set(topic, set);
      if (isPattern(topic)) {
        this.patterns.add(topic);
        // Topics given to start from that it matches resume under it.
        for (const t of [...this.seeded]) {
          if (matchesPattern(topic, t)) {
            this.seeded.delete(t);
            if (!this.named(t)) this.touch(t);
          }
        }
      } else {
        // Subscribed by name now: its cursor (a pattern's until now) goes with the topic.
        this.recent.delete(topic);
        this.seeded.delete(topic);
      }
    }
    set.add(sub);
    return fresh;
  }

  /** Ends a subscription; true when it was its topic's or pattern's last (the connection
   *  changes). */
  remove(sub: Sub): boolean {
    if (!sub.active) return false;
    sub.active = false;
    const topic = sub.topic;
    const s = this.subs.get(topic);
    s?.delete(sub);
    if (!s || s.size > 0) return false;
    this.subs.delete(topic);
    if (isPattern(topic)) {
      this.patterns.delete(topic);
      // The topics no other pattern delivers go with their cursors.
      for (const t of [...this.recent]) {
        if (this.patternOf(t) === undefined) {
          this.recent.delete(t);
          if (!this.held(t)) this.forget(t);
        }
      }
    } else if (this.patternOf(topic) !== undefined) {
      // A pattern still delivers it: its cursor stays, as the pattern's.
      this.touch(topic);
    } else if (!this.held(topic)) {
      this.forget(topic);
    }
    return true;
  }

  // ---- what a connection resumes from ----

  /** The topics of `wanted` with their cursors. */
  resume(wanted: Set<string>): Map<string, string | undefined> {
    const m = new Map<string, string | undefined>();
    for (const t of wanted) m.set(t, this.cursors.get(t));
    return m;
  }

  /** The cursors of the topics the patterns delivered, not among `wanted`. */
  patternCursors(wanted: Set<string>): Map<string, string> {
    const m = new Map<string, string>();
    for (const t of this.recent) {
      const c = this.cursors.get(t);
      if (c !== undefined && !wanted.has(t) && this.patternOf(t) !== undefined) m.set(t, c);
    }
    return m;
  }

  /** The most `last` messages a subscription of `topic` asks for, if any. */
  last(topic: string): number | undefined {
    let last: number | undefined;
    for (const sub of this.subs.get(topic) ?? []) {
      if (sub.active && sub.last !== undefined && (last === undefined || sub.last > last)) last = sub.last;
    }
    return last;
  }

  /** Whether a subscription of `topic` (a topic or a pattern) asked for deltas. */
  delta(topic: string): boolean {
    for (const sub of this.subs.get(topic) ?? []) if (sub.active && sub.delta) return true;
    return false;
  }

  // ---- delivery ----

  /** Delivers a message to its subscriptions, once; with none, to `serverMessage`
   *  listeners when `server(topic)` says the application subscribed the connection to it. */
  deliver(m: HeraldMessage, server: (topic: string) => boolean): void {
    const subs = this.subsFor(m.topic);
    const toServer = subs.length === 0 && server(m.topic);
    if (subs.length === 0 && !toServer) return;
    if (!isAfter(m.id, this.cursors.get(m.topic))) return; // already delivered
    this.cursors.set(m.topic, m.id);
    this.hints.delete(m.topic);
    if (!this.named(m.topic)) this.touch(m.topic);
    if (subs.length === 0) {
      this.events.emit("serverMessage", m);
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
        this.events.emit("error", asError(e));
      }
    }
  }

  /** A connection reports where a topic starts. */
  position(topic: string, cursor: string): void {
    if (!this.ownTopic(topic) && !this.held(topic)) return;
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

  /** A loss signal: the topic goes on from `cursor` (or the connection's hint), and the
   *  subscriptions' `onLost`, else `lost` listeners, are told. */
  lost(info: LostInfo, cursor: string | undefined): void {
    // A pattern's loss (the client fell behind its live stream): its topics' cursors stay,
    // as delivery goes on with what the stream still holds.
    const pattern = isPattern(info.topic);
    const subs = pattern ? [...(this.subs.get(info.topic) ?? [])] : this.subsFor(info.topic);
    if (subs.length === 0 && (pattern || !this.held(info.topic))) return;
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
          this.events.emit("error", asError(e));
        }
      }
    }
    if (!handled) this.events.emit("lost", info);
  }

  /** The connection that reported the hints ended. */
  clearHints(): void {
    this.hints.clear();
  }

  // ---- topics and patterns ----

  /** The first subscribed pattern that matches `topic`, if any. */
  patternOf(topic: string): string | undefined {
    for (const p of this.patterns) if (matchesPattern(p, topic)) return p;
    return undefined;
  }

  /** Whether the client subscribed `topic` itself: by name or with a pattern. */
  ownTopic(topic: string): boolean {
    return this.subs.has(topic) || this.patternOf(topic) !== undefined;
  }

  /** Whether `topic` has a cursor of its own, not as one of a pattern's topics: subscribed
   *  by name, or held by the application. */
  private named(topic: string): boolean {
    return this.subs.has(topic) || this.held(topic);
  }

  /** The subscriptions a message of `topic` goes to: the topic's, then its patterns'. */
  private subsFor(topic: string): Sub[] {
    const out = [...(this.subs.get(topic) ?? [])];
    for (const p of this.patterns) if (matchesPattern(p, topic)) out.push(...this.subs.get(p)!);
    return out;
  }

  /** A topic a pattern delivered, now the most recent: past `MAX_PATTERN_TOPICS`, the least
   *  recent is forgotten (its cursor too, unless it has one of its own). */
  touch(topic: string): void {
    this.recent.delete(topic);
    if (this.patternOf(topic) === undefined) return;
    this.recent.add(topic);
    while (this.recent.size > MAX_PATTERN_TOPICS) {
      const oldest = this.recent.values().next().value as string;
      this.recent.delete(oldest);
      if (!this.named(oldest)) this.forget(oldest);
    }
  }

  /** Drops a topic's cursor. */
  forget(topic: string): void {
    this.seeded.delete(topic);
    this.cursors.delete(topic);
    this.hints.delete(topic);
  }
}
