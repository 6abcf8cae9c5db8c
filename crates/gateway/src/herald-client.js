// heraldpush (the npm package of clients/js), bundled from its src/ by `npm run bundle` there. Do not edit:
// edit the sources and run it again (`npm test` checks this copy is current).

// src/types.ts
var HeraldError = class extends Error {
  constructor(status, code, reason) {
    super(`${code}: ${reason}${status ? ` (HTTP ${status})` : ""}`);
    this.status = status;
    this.code = code;
    this.reason = reason;
    this.name = "HeraldError";
  }
  status;
  code;
  reason;
};
function asError(e) {
  return e instanceof Error ? e : new Error(String(e));
}

// src/cursor.ts
var CURSOR = /^([0-9a-f]{1,16})-([0-9]{1,20})$/;
var TOPIC = /^[A-Za-z0-9_.:@-]{1,128}$/;
function isTopicName(name) {
  return TOPIC.test(name);
}
function parseCursor(text) {
  const m = CURSOR.exec(text);
  if (!m) return void 0;
  return { epoch: m[1].replace(/^0+(?=.)/, ""), seq: m[2].replace(/^0+(?=.)/, "") };
}
function compareSeq(a, b) {
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}
function isAfter(id, cursor) {
  if (cursor === void 0) return true;
  const a = parseCursor(id);
  const b = parseCursor(cursor);
  if (!a || !b || a.epoch !== b.epoch) return true;
  return compareSeq(a.seq, b.seq) > 0;
}
function parseResumeList(text) {
  const out = /* @__PURE__ */ new Map();
  for (const entry of text.split(",")) {
    const eq = entry.indexOf("=");
    if (eq <= 0) continue;
    const topic = entry.slice(0, eq).trim();
    const cursor = entry.slice(eq + 1).trim();
    if (isTopicName(topic) && parseCursor(cursor)) out.set(topic, cursor);
  }
  return out;
}
function formatResumeList(cursors) {
  const parts = [];
  for (const [topic, cursor] of cursors) {
    if (cursor !== void 0) parts.push(`${topic}=${cursor}`);
  }
  return parts.join(",");
}

// src/pattern.ts
var MAX_PATTERN_TOPICS = 32;
var PERSONAL = ["user:", "conn:"];
function isPattern(name) {
  return name.endsWith("*");
}
function subscriptionError(name) {
  if (!isPattern(name)) {
    if (name.includes("*")) return "`*` stands only last, after `.` or `:` (a pattern such as `orders.*`): anywhere else it is not a topic character";
    return isTopicName(name) ? void 0 : "1-128 characters of A-Z a-z 0-9 _ . : @ -";
  }
  const prefix = name.slice(0, -1);
  if (prefix === "") return "a bare `*` would match every topic; give a prefix ending in `.` or `:`, such as `orders.*`";
  if (name.length > 128) return "longer than 128 characters, as a topic name";
  if (prefix.includes("*")) return "`*` stands only last, after `.` or `:` (`orders.*`): anywhere else it is not a topic character";
  if (!isTopicName(prefix)) return "the prefix is 1-127 characters of A-Z a-z 0-9 _ . : @ -, then `*`";
  if (!prefix.endsWith(".") && !prefix.endsWith(":")) {
    return "`*` must follow `.` or `:` and stand last (`orders.*`): it matches whole name segments";
  }
  if (PERSONAL.some((p) => prefix.startsWith(p))) return "personal topics (`user:`, `conn:`) cannot be matched by a pattern";
  return void 0;
}
function matchesPattern(pattern, topic) {
  if (!isPattern(pattern) || isPattern(topic)) return false;
  const prefix = pattern.slice(0, -1);
  return topic.startsWith(prefix) && (prefix.includes(":") || !topic.includes(":"));
}
function matchedBy(names, topic) {
  for (const n of names) if (matchesPattern(n, topic)) return true;
  return false;
}

// src/backoff.ts
function fullJitter(attempt, options = {}, random = Math.random) {
  const base = options.base ?? 500;
  const max = options.max ?? 3e4;
  const bound = Math.min(max, base * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.floor(random() * bound);
}
var Reconnects = class {
  constructor(urls, transports, backoff, random) {
    this.urls = urls;
    this.transports = transports;
    this.backoff = backoff;
    this.random = random;
  }
  urls;
  transports;
  backoff;
  random;
  /** Index of the transport the next attempt uses. */
  transport = 0;
  /** Index of the URL the next attempt uses. */
  url = 0;
  /** Attempts failed on this transport since it was chosen (one per URL before moving on). */
  failsHere = 0;
  /** Attempts failed in a row: the backoff's exponent. */
  failures = 0;
  /** The delay after an attempt that failed before connecting (no token). */
  failed() {
    return fullJitter(this.failures++, this.backoff, this.random);
  }
  /** Transport `ti`, preferred to the one in use, opened and took over. */
  upgraded(ti) {
    this.transport = ti;
    this.failsHere = 0;
  }
  /** The delay after a connection of transport `ti` ended, not refused: `stable` when it
   *  had been open for long enough to count as a success. */
  closed(info, ti, stable) {
    if (info.shutdown) {
      return info.retryMs ?? fullJitter(3, this.backoff, this.random);
    }
    if (stable) {
      this.failures = 0;
      this.failsHere = 0;
      return info.retryMs ?? fullJitter(0, this.backoff, this.random);
    }
    this.url = (this.url + 1) % this.urls;
    this.failsHere++;
    if (this.failsHere >= this.urls && ti === this.transport) {
      this.failsHere = 0;
      this.transport = (this.transport + 1) % this.transports;
    }
    return Math.max(info.retryMs ?? 0, fullJitter(this.failures++, this.backoff, this.random));
  }
};

// src/events.ts
var Emitter = class {
  /** `listeners` names every event, each with an empty set: listening to another throws. */
  constructor(listeners) {
    this.listeners = listeners;
  }
  listeners;
  on(event, fn) {
    this.listeners[event].add(fn);
  }
  off(event, fn) {
    this.listeners[event].delete(fn);
  }
  /** How many listen to `event`. */
  count(event) {
    return this.listeners[event].size;
  }
  /** Calls every listener of `event` (those listening when it starts), each in turn: one
   *  that throws does not stop the others, nor the caller. */
  emit(event, value) {
    for (const fn of [...this.listeners[event]]) {
      try {
        fn(value);
      } catch {
      }
    }
  }
};

// src/token.ts
function claims(token) {
  const part = token.split(".")[1];
  if (!part) return void 0;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const c = JSON.parse(atob(b64));
    return typeof c === "object" && c !== null ? c : void 0;
  } catch {
    return void 0;
  }
}
function tokenExpiry(token) {
  const exp = claims(token)?.exp;
  return typeof exp === "number" ? exp : void 0;
}
function personalTopic(token) {
  const sub = claims(token)?.sub;
  if (typeof sub !== "string") return void 0;
  const topic = `user:${sub}`;
  return isTopicName(topic) ? topic : void 0;
}
var TokenKeeper = class {
  constructor(source, margin, refreshed, failed) {
    this.source = source;
    this.margin = margin;
    this.refreshed = refreshed;
    this.failed = failed;
    if (typeof source === "string") this.set(source);
  }
  source;
  margin;
  refreshed;
  failed;
  /** The current token, if any. */
  current;
  timer;
  pending;
  /** A refused token was replaced once already (reset when a connection opens). */
  retried = false;
  /** A token is wanted and not fetched yet (a connection waits for `refresh()`). */
  get missing() {
    return this.source !== void 0 && this.current === void 0;
  }
  set(token) {
    this.current = token;
    clearTimeout(this.timer);
    const exp = tokenExpiry(token);
    if (exp === void 0 || typeof this.source !== "function") return;
    const wait = Math.max(0, exp * 1e3 - Date.now() - this.margin);
    this.timer = setTimeout(() => {
      this.refresh().then(() => {
        if (this.current) {
          this.refreshed(this.current);
        }
      }).catch((e) => this.failed(asError(e)));
    }, Math.min(wait, 2 ** 31 - 1));
  }
  /** Fetches a fresh token (one call of the function at a time). */
  refresh() {
    const source = this.source;
    if (typeof source !== "function") {
      if (typeof source === "string") this.current = source;
      return Promise.resolve();
    }
    this.pending ??= (async () => {
      try {
        const t = await source();
        if (typeof t !== "string" || t === "") throw new TypeError("Herald: the token function gave no token");
        this.set(t);
      } finally {
        this.pending = void 0;
      }
    })();
    return this.pending;
  }
  /** The token expired: the next connection fetches another first. */
  expired() {
    this.current = void 0;
  }
  /** The gateway refused the token: whether to try once more with a fresh one (a token
   *  function, not tried yet since a connection last opened). */
  retryRefused() {
    if (typeof this.source !== "function" || this.retried) return false;
    this.retried = true;
    this.current = void 0;
    return true;
  }
  /** A connection opened with the token. */
  accepted() {
    this.retried = false;
  }
  /** Stops refreshing (`close()`). */
  stop() {
    clearTimeout(this.timer);
  }
};

// src/subscriptions.ts
var Subscriptions = class {
  constructor(held, events) {
    this.held = held;
    this.events = events;
  }
  held;
  events;
  /** Subscriptions by topic or pattern. */
  subs = /* @__PURE__ */ new Map();
  /** The patterns among `subs`' keys. */
  patterns = /* @__PURE__ */ new Set();
  /** Cursors of the topics subscribed, held by the application, or delivered by a pattern. */
  cursors = /* @__PURE__ */ new Map();
  /** Topics delivered by a pattern and not subscribed by name, the least recently delivered
   *  first: past `MAX_PATTERN_TOPICS` the first is forgotten (as the gateway does). */
  recent = /* @__PURE__ */ new Set();
  /** Starting positions a connection reported in another epoch than the cursor's: where
   *  delivery goes on once that connection's loss signal arrives. */
  hints = /* @__PURE__ */ new Map();
  /** Topics whose cursor was given to start from and that no subscription has taken yet
   *  (a pattern subscribed later takes those it matches as its topics). */
  seeded = /* @__PURE__ */ new Set();
  /** The topics and patterns subscribed. */
  names() {
    return this.subs.keys();
  }
  /** A topic's cursor, if any. */
  cursor(topic) {
    return this.cursors.get(topic);
  }
  /** Every cursor held: topics subscribed by name, held by the application, delivered by a
   *  pattern, or given to start from and not subscribed yet. */
  all() {
    return Object.fromEntries(this.cursors);
  }
  /** Cursors to start from (saved from an earlier client's `cursors()`): a topic subscribed
   *  later, by name or through a pattern, resumes after it. Entries that are not a topic
   *  name and a cursor are refused with a `TypeError`. */
  seed(cursors) {
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
  add(sub, maxTopics) {
    const topic = sub.topic;
    let set = this.subs.get(topic);
    const fresh = !set;
    if (!set) {
      if (this.subs.size >= maxTopics) {
        throw new RangeError(`Herald: at most ${maxTopics} topics per connection`);
      }
      set = /* @__PURE__ */ new Set();
      this.subs.set(topic, set);
      if (isPattern(topic)) {
        this.patterns.add(topic);
        for (const t of [...this.seeded]) {
          if (matchesPattern(topic, t)) {
            this.seeded.delete(t);
            if (!this.named(t)) this.touch(t);
          }
        }
      } else {
        this.recent.delete(topic);
        this.seeded.delete(topic);
      }
    }
    set.add(sub);
    return fresh;
  }
  /** Ends a subscription; true when it was its topic's or pattern's last (the connection
   *  changes). */
  remove(sub) {
    if (!sub.active) return false;
    sub.active = false;
    const topic = sub.topic;
    const s = this.subs.get(topic);
    s?.delete(sub);
    if (!s || s.size > 0) return false;
    this.subs.delete(topic);
    if (isPattern(topic)) {
      this.patterns.delete(topic);
      for (const t of [...this.recent]) {
        if (this.patternOf(t) === void 0) {
          this.recent.delete(t);
          if (!this.held(t)) this.forget(t);
        }
      }
    } else if (this.patternOf(topic) !== void 0) {
      this.touch(topic);
    } else if (!this.held(topic)) {
      this.forget(topic);
    }
    return true;
  }
  // ---- what a connection resumes from ----
  /** The topics of `wanted` with their cursors. */
  resume(wanted) {
    const m = /* @__PURE__ */ new Map();
    for (const t of wanted) m.set(t, this.cursors.get(t));
    return m;
  }
  /** The cursors of the topics the patterns delivered, not among `wanted`. */
  patternCursors(wanted) {
    const m = /* @__PURE__ */ new Map();
    for (const t of this.recent) {
      const c = this.cursors.get(t);
      if (c !== void 0 && !wanted.has(t) && this.patternOf(t) !== void 0) m.set(t, c);
    }
    return m;
  }
  /** The most `last` messages a subscription of `topic` asks for, if any. */
  last(topic) {
    let last;
    for (const sub of this.subs.get(topic) ?? []) {
      if (sub.active && sub.last !== void 0 && (last === void 0 || sub.last > last)) last = sub.last;
    }
    return last;
  }
  /** Whether a subscription of `topic` (a topic or a pattern) asked for deltas. */
  delta(topic) {
    for (const sub of this.subs.get(topic) ?? []) if (sub.active && sub.delta) return true;
    return false;
  }
  // ---- delivery ----
  /** Delivers a message to its subscriptions, once; with none, to `serverMessage`
   *  listeners when `server(topic)` says the application subscribed the connection to it. */
  deliver(m, server) {
    const subs = this.subsFor(m.topic);
    const toServer = subs.length === 0 && server(m.topic);
    if (subs.length === 0 && !toServer) return;
    if (!isAfter(m.id, this.cursors.get(m.topic))) return;
    this.cursors.set(m.topic, m.id);
    this.hints.delete(m.topic);
    if (!this.named(m.topic)) this.touch(m.topic);
    if (subs.length === 0) {
      this.events.emit("serverMessage", m);
      return;
    }
    const called = /* @__PURE__ */ new Set();
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
  position(topic, cursor) {
    if (!this.ownTopic(topic) && !this.held(topic)) return;
    if (isPattern(topic) || !parseCursor(cursor)) return;
    const current = this.cursors.get(topic);
    if (current === void 0) {
      this.cursors.set(topic, cursor);
    } else {
      const a = parseCursor(current);
      const b = parseCursor(cursor);
      if (a && a.epoch !== b.epoch) {
        this.hints.set(topic, cursor);
      } else if (isAfter(cursor, current)) {
        this.cursors.set(topic, cursor);
      }
    }
    if (!this.named(topic) && !this.recent.has(topic)) this.touch(topic);
  }
  /** A loss signal: the topic goes on from `cursor` (or the connection's hint), and the
   *  subscriptions' `onLost`, else `lost` listeners, are told. */
  lost(info, cursor) {
    const pattern = isPattern(info.topic);
    const subs = pattern ? [...this.subs.get(info.topic) ?? []] : this.subsFor(info.topic);
    if (subs.length === 0 && (pattern || !this.held(info.topic))) return;
    if (!pattern) {
      const next = cursor ?? this.hints.get(info.topic);
      if (next !== void 0) this.cursors.set(info.topic, next);
      else this.cursors.delete(info.topic);
      this.hints.delete(info.topic);
      if (!this.named(info.topic)) this.touch(info.topic);
    }
    let handled = false;
    const called = /* @__PURE__ */ new Set();
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
  clearHints() {
    this.hints.clear();
  }
  // ---- topics and patterns ----
  /** The first subscribed pattern that matches `topic`, if any. */
  patternOf(topic) {
    for (const p of this.patterns) if (matchesPattern(p, topic)) return p;
    return void 0;
  }
  /** Whether the client subscribed `topic` itself: by name or with a pattern. */
  ownTopic(topic) {
    return this.subs.has(topic) || this.patternOf(topic) !== void 0;
  }
  /** Whether `topic` has a cursor of its own, not as one of a pattern's topics: subscribed
   *  by name, or held by the application. */
  named(topic) {
    return this.subs.has(topic) || this.held(topic);
  }
  /** The subscriptions a message of `topic` goes to: the topic's, then its patterns'. */
  subsFor(topic) {
    const out = [...this.subs.get(topic) ?? []];
    for (const p of this.patterns) if (matchesPattern(p, topic)) out.push(...this.subs.get(p));
    return out;
  }
  /** A topic a pattern delivered, now the most recent: past `MAX_PATTERN_TOPICS`, the least
   *  recent is forgotten (its cursor too, unless it has one of its own). */
  touch(topic) {
    this.recent.delete(topic);
    if (this.patternOf(topic) === void 0) return;
    this.recent.add(topic);
    while (this.recent.size > MAX_PATTERN_TOPICS) {
      const oldest = this.recent.values().next().value;
      this.recent.delete(oldest);
      if (!this.named(oldest)) this.forget(oldest);
    }
  }
  /** Drops a topic's cursor. */
  forget(topic) {
    this.seeded.delete(topic);
    this.cursors.delete(topic);
    this.hints.delete(topic);
  }
};

// src/server.ts
var ServerSubscriptions = class {
  constructor(mode, subs, tokens, events, changed) {
    this.mode = mode;
    this.subs = subs;
    this.tokens = tokens;
    this.events = events;
    this.changed = changed;
    this.keepPersonal = mode === "always";
  }
  mode;
  subs;
  tokens;
  events;
  changed;
  /** Topics the application subscribed each live connection to (the connection's and the
   *  probe's), as the connection reported them. */
  sets = /* @__PURE__ */ new Map();
  /** The personal topic is kept across connections (`personalTopic`). */
  keepPersonal;
  /** The kept personal topic, if any (from the current token's `sub`). */
  personal() {
    if (!this.keepPersonal || this.mode === "off" || !this.tokens.current) return void 0;
    return personalTopic(this.tokens.current);
  }
  /** The personal topic is kept but the token that names it is not fetched yet. */
  personalPending() {
    return this.keepPersonal && this.mode !== "off" && this.tokens.missing;
  }
  /** The topics the client subscribes itself: its subscriptions and the kept personal topic. */
  wanted() {
    const out = new Set(this.subs.names());
    const personal = this.personal();
    if (personal) out.add(personal);
    return out;
  }
  /** Whether the application holds `topic`: on any live connection, or the kept personal one. */
  held(topic) {
    if (topic === this.personal()) return true;
    for (const set of this.sets.values()) if (set.has(topic)) return true;
    return false;
  }
  /** Whether a message of `topic` from `conn` goes to `serverMessage` listeners. */
  carries(conn, topic) {
    return this.sets.get(conn)?.has(topic) || topic === this.personal();
  }
  /** The topics for `serverMessage` listeners on `conn`, less those the client subscribed. */
  list(conn) {
    const out = new Set(conn ? this.sets.get(conn) : void 0);
    const personal = this.personal();
    if (personal) out.add(personal);
    return [...out].filter((t) => !this.subs.ownTopic(t));
  }
  /** A connection reports topics the application subscribed it to (`main`: the connection,
   *  not a probe, whose topics the application is told of when it takes over). */
  subscribed(conn, topics, main) {
    let set = this.sets.get(conn);
    if (!set) this.sets.set(conn, set = /* @__PURE__ */ new Set());
    const added = topics.filter((t) => isTopicName(t) && !set.has(t));
    for (const t of added) set.add(t);
    const personal = this.tokens.current ? personalTopic(this.tokens.current) : void 0;
    let keep = false;
    if (personal && added.includes(personal) && !this.keepPersonal && this.mode !== "off") {
      this.keepPersonal = true;
      keep = true;
    }
    if (main) {
      const told = added.filter((t) => !this.subs.ownTopic(t));
      if (told.length > 0) this.events.emit("serverSubscribe", { topics: told });
    }
    if (keep) this.changed();
  }
  /** A connection reports topics the application dropped, or that its new stream lost. */
  unsubscribed(conn, topics, ended, main) {
    const set = this.sets.get(conn);
    const removed = topics.filter((t) => set?.has(t) || !ended && t === this.personal());
    for (const t of removed) set?.delete(t);
    if (!ended && this.personal() !== void 0 && removed.includes(this.personal())) this.keepPersonal = false;
    if (main) this.gone(removed, ended ? "connection" : "server");
    if (!ended) this.changed();
  }
  /** A probe took over from `old`: what the application subscribed `old` to and not `next`
   *  ends; what it subscribed the probe to (a connect hook), it is told now. */
  replaced(old, next) {
    const before = old ? this.sets.get(old) : void 0;
    if (old) this.ended(old, next);
    const fresh = [...this.sets.get(next) ?? []].filter((t) => !before?.has(t) && !this.subs.ownTopic(t));
    if (fresh.length > 0) this.events.emit("serverSubscribe", { topics: fresh });
  }
  /** A connection ended, or was replaced by `next`: what the application had subscribed it
   *  to ends with it (the gateway does not carry it over). */
  ended(conn, next) {
    const set = this.sets.get(conn);
    this.sets.delete(conn);
    if (!set) return;
    const carried = next ? this.sets.get(next) : void 0;
    const lost = [...set].filter((t) => !carried?.has(t));
    this.gone(lost, "connection");
  }
  /** A probe ended before it took over: its topics go, untold. */
  discard(conn) {
    this.sets.delete(conn);
  }
  /** The client closed. */
  clear() {
    this.sets.clear();
  }
  /** Topics no longer subscribed by the application: their cursors go unless the client
   *  holds them itself; the application is told. */
  gone(topics, reason) {
    const wanted = this.wanted();
    const gone = topics.filter((t) => !wanted.has(t));
    for (const t of gone) {
      if (this.held(t)) continue;
      if (this.subs.patternOf(t) !== void 0) this.subs.touch(t);
      else this.subs.forget(t);
    }
    const told = gone.filter((t) => !this.subs.ownTopic(t));
    if (told.length > 0) this.events.emit("serverUnsubscribe", { topics: told, reason });
  }
};

// src/delta.ts
var MAX_DELTA_TARGET = 64 * 1024 * 1024;
var DeltaError = class extends Error {
  /** For `error` listeners: always `bad_delta`. */
  code = "bad_delta";
  name = "DeltaError";
};
var DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
var VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < DIGITS.length; i++) VALUE[DIGITS.charCodeAt(i)] = i;
function fossilChecksum(b) {
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  let i = 0;
  const n4 = b.length & ~3;
  for (; i < n4; i += 4) {
    s0 = s0 + b[i] | 0;
    s1 = s1 + b[i + 1] | 0;
    s2 = s2 + b[i + 2] | 0;
    s3 = s3 + b[i + 3] | 0;
  }
  let sum = s3 + (s2 << 8) + (s1 << 16) + (s0 << 24) | 0;
  const rest = b.length - n4;
  if (rest >= 3) sum = sum + (b[i + 2] << 8) | 0;
  if (rest >= 2) sum = sum + (b[i + 1] << 16) | 0;
  if (rest >= 1) sum = sum + (b[i] << 24) | 0;
  return sum >>> 0;
}
function applyFossil(base, delta, max = MAX_DELTA_TARGET) {
  let pos = 0;
  const int = () => {
    let v = 0;
    const start = pos;
    while (pos < delta.length) {
      const c = delta[pos];
      const d = c < 128 ? VALUE[c] : -1;
      if (d < 0) break;
      v = v * 64 + d;
      if (v > 4294967295) throw new DeltaError("delta: a number past 32 bits");
      pos++;
    }
    if (pos === start) throw new DeltaError(`delta: a number expected at byte ${start}`);
    return v;
  };
  const size = int();
  if (delta[pos] !== 10) throw new DeltaError("delta: the size is not followed by a newline");
  pos++;
  if (size > max) throw new DeltaError(`delta: claims a result of ${size} bytes (at most ${max})`);
  const out = new Uint8Array(size);
  let len = 0;
  while (pos < delta.length) {
    const cnt = int();
    const op = delta[pos++];
    switch (op) {
      case 64: {
        const ofst = int();
        if (delta[pos++] !== 44) throw new DeltaError("delta: a copy not ended by ','");
        if (cnt > size - len) throw new DeltaError("delta: a copy past the claimed size");
        if (ofst + cnt > base.length) throw new DeltaError("delta: a copy past the end of the base");
        out.set(base.subarray(ofst, ofst + cnt), len);
        len += cnt;
        break;
      }
      case 58: {
        if (cnt > size - len) throw new DeltaError("delta: an insert past the claimed size");
        if (cnt > delta.length - pos) throw new DeltaError("delta: an insert past the end of the delta");
        out.set(delta.subarray(pos, pos + cnt), len);
        len += cnt;
        pos += cnt;
        break;
      }
      case 59: {
        if (len !== size) throw new DeltaError(`delta: ${len} bytes made, ${size} claimed`);
        if (pos !== delta.length) throw new DeltaError("delta: bytes after the checksum");
        if (cnt !== fossilChecksum(out)) throw new DeltaError("delta: bad checksum");
        return out;
      }
      default:
        throw new DeltaError(`delta: unknown command at byte ${pos - 1}`);
    }
  }
  throw new DeltaError("delta: no checksum (truncated)");
}
var DATA_KEY = '"data":';
function jsonDataText(frame) {
  const at = frame.indexOf(DATA_KEY);
  const end = frame.lastIndexOf("}");
  if (at < 0 || end < at + DATA_KEY.length) throw new DeltaError("a message frame without data");
  return frame.slice(at + DATA_KEY.length, end);
}
function skipJson(text, i) {
  while (i < text.length && " 	\r\n".includes(text[i])) i++;
  const c = text[i];
  if (c === '"') return skipString(text, i);
  if (c === "{" || c === "[") {
    let depth = 0;
    for (; i < text.length; i++) {
      const ch = text[i];
      if (ch === '"') i = skipString(text, i) - 1;
      else if (ch === "{" || ch === "[") depth++;
      else if (ch === "}" || ch === "]") {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    throw new DeltaError("unterminated JSON value");
  }
  while (i < text.length && !",}] 	\r\n".includes(text[i])) i++;
  return i;
}
function skipString(text, i) {
  for (i++; i < text.length; i++) {
    const ch = text[i];
    if (ch === "\\") i++;
    else if (ch === '"') return i + 1;
  }
  throw new DeltaError("unterminated JSON string");
}
function pollMessageTexts(answer) {
  let i = answer.indexOf("{") + 1;
  if (i === 0) throw new DeltaError("poll answer: not an object");
  for (; ; ) {
    while (i < answer.length && " 	\r\n,".includes(answer[i])) i++;
    if (answer[i] !== '"') throw new DeltaError("poll answer: no messages");
    const keyEnd = skipString(answer, i);
    const key = answer.slice(i, keyEnd);
    i = answer.indexOf(":", keyEnd) + 1;
    if (key !== '"messages"') {
      i = skipJson(answer, i);
      continue;
    }
    while (" 	\r\n".includes(answer[i])) i++;
    if (answer[i] !== "[") throw new DeltaError("poll answer: messages is not an array");
    i++;
    const out = [];
    for (; ; ) {
      while (i < answer.length && " 	\r\n,".includes(answer[i])) i++;
      if (i >= answer.length) throw new DeltaError("poll answer: unterminated messages");
      if (answer[i] === "]") return out;
      const end = skipJson(answer, i);
      out.push(answer.slice(i, end));
      i = end;
    }
  }
}
function jsonArrayTexts(text) {
  let i = 0;
  while (i < text.length && " 	\r\n".includes(text[i])) i++;
  if (text[i] !== "[") throw new DeltaError("batch: not an array");
  i++;
  const out = [];
  for (; ; ) {
    while (i < text.length && " 	\r\n,".includes(text[i])) i++;
    if (i >= text.length) throw new DeltaError("batch: unterminated array");
    if (text[i] === "]") return out;
    const end = skipJson(text, i);
    out.push(text.slice(i, end));
    i = end;
  }
}
function msgpackArrayItems(frame) {
  const r = new MsgpackSkipper(frame);
  const n = r.arrayHeader();
  const out = [];
  for (let k = 0; k < n; k++) {
    const start = r.pos;
    r.skip(0);
    out.push(frame.subarray(start, r.pos));
  }
  return out;
}
function msgpackDataBytes(frame) {
  const r = new MsgpackSkipper(frame);
  const n = r.mapHeader();
  for (let k = 0; k < n; k++) {
    const keyStart = r.pos;
    r.skip(0);
    const key = frame.subarray(keyStart, r.pos);
    const start = r.pos;
    r.skip(0);
    if (key.length === 5 && key[0] === 164 && key[1] === 100 && key[2] === 97 && key[3] === 116 && key[4] === 97) {
      return frame.subarray(start, r.pos);
    }
  }
  throw new DeltaError("a message frame without data");
}
var MsgpackSkipper = class {
  constructor(b) {
    this.b = b;
  }
  b;
  pos = 0;
  need(n) {
    if (n > this.b.length - this.pos) throw new DeltaError("truncated MessagePack");
    const at = this.pos;
    this.pos += n;
    return at;
  }
  uint(n) {
    const at = this.need(n);
    let v = 0;
    for (let i = 0; i < n; i++) v = v * 256 + this.b[at + i];
    return v;
  }
  arrayHeader() {
    const c = this.b[this.need(1)];
    if (c >= 144 && c <= 159) return c & 15;
    if (c === 220) return this.uint(2);
    if (c === 221) return this.uint(4);
    throw new DeltaError("a MessagePack batch that is not an array");
  }
  mapHeader() {
    const c = this.b[this.need(1)];
    if (c >= 128 && c <= 143) return c & 15;
    if (c === 222) return this.uint(2);
    if (c === 223) return this.uint(4);
    throw new DeltaError("a MessagePack frame that is not a map");
  }
  skip(depth) {
    if (depth > 100) throw new DeltaError("MessagePack nested too deep");
    const c = this.b[this.need(1)];
    if (c <= 127 || c >= 224 || c === 192 || c === 194 || c === 195) return;
    if (c >= 160 && c <= 191) return void this.need(c & 31);
    if (c >= 128 && c <= 143) return this.items(2 * (c & 15), depth);
    if (c >= 144 && c <= 159) return this.items(c & 15, depth);
    switch (c) {
      case 196:
      case 217:
        return void this.need(this.uint(1));
      // prettier-ignore
      case 197:
      case 218:
        return void this.need(this.uint(2));
      // prettier-ignore
      case 198:
      case 219:
        return void this.need(this.uint(4));
      // prettier-ignore
      case 199:
        return void this.need(this.uint(1) + 1);
      case 200:
        return void this.need(this.uint(2) + 1);
      case 201:
        return void this.need(this.uint(4) + 1);
      case 202:
        return void this.need(4);
      case 203:
        return void this.need(8);
      case 204:
      case 208:
        return void this.need(1);
      // prettier-ignore
      case 205:
      case 209:
        return void this.need(2);
      // prettier-ignore
      case 206:
      case 210:
        return void this.need(4);
      // prettier-ignore
      case 207:
      case 211:
        return void this.need(8);
      // prettier-ignore
      case 212:
        return void this.need(2);
      case 213:
        return void this.need(3);
      case 214:
        return void this.need(5);
      case 215:
        return void this.need(9);
      case 216:
        return void this.need(17);
      case 220:
        return this.items(this.uint(2), depth);
      case 221:
        return this.items(this.uint(4), depth);
      case 222:
        return this.items(2 * this.uint(2), depth);
      case 223:
        return this.items(2 * this.uint(4), depth);
      default:
        throw new DeltaError(`MessagePack: bad byte 0x${c.toString(16)}`);
    }
  }
  items(n, depth) {
    for (let i = 0; i < n; i++) this.skip(depth + 1);
  }
};
var deltaMessages = /* @__PURE__ */ new WeakSet();
var utf8 = new TextEncoder();
var utf8Strict = new TextDecoder("utf-8", { fatal: true });
var Bases = class {
  constructor(wants, decodeMsgpack) {
    this.wants = wants;
    this.decodeMsgpack = decodeMsgpack;
  }
  wants;
  decodeMsgpack;
  bases = /* @__PURE__ */ new Map();
  /** A message read from a JSON frame (`frame`: its raw text): a delta is applied (its data
   *  replaced by the full data); the base is kept. Throws `DeltaError`. */
  json(m, frame) {
    const delta = deltaMessages.has(m);
    if (!delta) {
      if (this.wants(m.topic)) this.bases.set(m.topic, jsonDataText(frame()));
      else this.bases.delete(m.topic);
      return false;
    }
    const base = this.take(m.topic);
    if (typeof m.data !== "string") throw new DeltaError("delta: data is not a string");
    const out = applyFossil(typeof base === "string" ? utf8.encode(base) : base, utf8.encode(m.data));
    let text;
    try {
      text = utf8Strict.decode(out);
      m.data = JSON.parse(text);
    } catch (e) {
      throw new DeltaError(`delta: the result is not JSON: ${e.message}`);
    }
    deltaMessages.delete(m);
    if (this.wants(m.topic)) this.bases.set(m.topic, text);
    return true;
  }
  /** A message read from a MessagePack frame (`frame`: its bytes, or a function giving them,
   *  called only when a base is kept). Throws `DeltaError`. */
  msgpack(m, frame) {
    const delta = deltaMessages.has(m);
    if (!delta) {
      if (this.wants(m.topic)) this.bases.set(m.topic, msgpackDataBytes(typeof frame === "function" ? frame() : frame).slice());
      else this.bases.delete(m.topic);
      return false;
    }
    const base = this.take(m.topic);
    if (!(m.data instanceof Uint8Array)) throw new DeltaError("delta: data is not bin");
    const out = applyFossil(typeof base === "string" ? utf8.encode(base) : base, m.data);
    try {
      m.data = this.decodeMsgpack(out);
    } catch (e) {
      throw new DeltaError(`delta: the result is not MessagePack: ${e.message}`);
    }
    deltaMessages.delete(m);
    if (this.wants(m.topic)) this.bases.set(m.topic, out);
    return true;
  }
  /** The base of `topic`, dropped from the map (a failure leaves none). */
  take(topic) {
    const base = this.bases.get(topic);
    this.bases.delete(topic);
    if (base === void 0) throw new DeltaError(`delta: no base held for ${topic}`);
    return base;
  }
  drop(topic) {
    this.bases.delete(topic);
  }
  clear() {
    this.bases.clear();
  }
  get size() {
    return this.bases.size;
  }
};

// src/connector.ts
var Connector = class {
  constructor(p) {
    this.p = p;
  }
  p;
  _state = "connecting";
  _transport;
  _closed = false;
  conn;
  /** The transport (index) of `conn`. */
  connTransport = 0;
  connOpenedAt;
  probe;
  everOpen = false;
  retryTimer;
  probeTimer;
  updateQueued = false;
  /** A connection attempt waits for its token. */
  starting = false;
  /** Deltas applied, those that could not be, and WebSocket batch frames received. */
  stats = { deltas: 0, deltaFailures: 0, batches: 0 };
  get state() {
    return this._state;
  }
  /** The transport in use now (the last one that opened), if any. */
  get transport() {
    return this._transport;
  }
  get closed() {
    return this._closed;
  }
  /** The connection, open or opening, if any. */
  get current() {
    return this.conn;
  }
  /** The URL connected to, or to be connected to next. */
  get url() {
    return this.p.urls[this.p.retry.url];
  }
  /** The topics the client asks for changed (or something to connect for appeared): the
   *  connection updates, drops, or is made. */
  topicsChanged() {
    if (this._closed || this.updateQueued) return;
    this.updateQueued = true;
    queueMicrotask(() => {
      this.updateQueued = false;
      if (this._closed) return;
      if (this.p.server.wanted().size === 0) {
        if (this.conn && this.conn.transport !== "websocket") this.drop();
        this.probe?.close();
        this.probe = void 0;
        if (this.conn) {
          this.conn.update();
          return;
        }
        if (this.p.events.count("serverMessage") === 0 && !this.p.server.personalPending()) return;
      }
      if (this.conn) {
        this.conn.update();
        this.probe?.update();
      } else if (this.retryTimer === void 0) {
        void this.connect();
      }
    });
  }
  /** Closes the connection for good. */
  close() {
    if (this._closed) return;
    this._closed = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.probeTimer);
    this.p.tokens.stop();
    this.probe?.close();
    this.probe = void 0;
    this.conn?.close();
    this.conn = void 0;
    this.p.server.clear();
    this.setState("closed");
  }
  drop() {
    const old = this.conn;
    old?.close();
    this.conn = void 0;
    if (old) this.p.server.ended(old);
    clearTimeout(this.probeTimer);
    if (this._state !== "closed") this.setState("connecting");
  }
  async connect() {
    this.retryTimer = void 0;
    const retry = this.p.retry;
    if (this._closed || this.conn || this.starting || !this.mayConnect(retry.transport)) return;
    if (this.p.tokens.missing) {
      this.starting = true;
      try {
        await this.p.tokens.refresh();
      } catch (e) {
        this.p.events.emit("error", asError(e));
        this.schedule(retry.failed());
        return;
      } finally {
        this.starting = false;
      }
      if (this._closed || this.conn || this.retryTimer !== void 0 || !this.mayConnect(retry.transport)) return;
    }
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    const ti = retry.transport;
    const conn = this.spawn(ti, this.url);
    if (!conn) return;
    this.conn = conn;
    this.connTransport = ti;
    this.connOpenedAt = void 0;
  }
  /** A connection of transport `ti` whose reports count while it is the connection, or the
   *  probe (which becomes the connection when it opens). */
  spawn(ti, url) {
    const { subs, server } = this.p;
    const transport = this.p.transports[ti];
    let conn;
    const main = () => conn !== void 0 && this.conn === conn;
    const probing = () => conn !== void 0 && this.probe === conn;
    const handlers = {
      open: () => {
        if (probing()) this.promote(conn, ti);
        else if (main()) this.onOpen(ti, transport);
      },
      message: (m) => {
        if (main() || probing()) subs.deliver(m, (topic) => server.carries(conn, topic));
      },
      lost: (info, cursor) => {
        if (main() || probing()) subs.lost(info, cursor);
      },
      position: (topic, cursor) => {
        if (main() || probing()) subs.position(topic, cursor);
      },
      serverSubscribed: (topics) => {
        if (main() || probing()) server.subscribed(conn, topics, main());
      },
      delta: (topic, error) => {
        if (!main() && !probing()) return;
        if (error === void 0) {
          this.stats.deltas++;
          return;
        }
        this.stats.deltaFailures++;
        const e = new DeltaError(`${transport}: a delta of ${topic} did not apply (${error.message}): subscribed again from its cursor`);
        this.p.events.emit("error", e);
      },
      batch: () => {
        if (main() || probing()) this.stats.batches++;
      },
      serverUnsubscribed: (topics, ended) => {
        if (main() || probing()) server.unsubscribed(conn, topics, ended, main());
      },
      close: (info) => {
        if (main()) {
          this.conn = void 0;
          server.ended(conn);
          this.onClose(info, ti);
        } else if (probing()) {
          this.probe = void 0;
          server.discard(conn);
          if (ti + 1 < this.connTransport) this.startProbe(ti + 1);
          else this.scheduleProbe();
        }
      }
    };
    try {
      conn = this.p.open(transport, url, handlers);
      return conn;
    } catch (e) {
      if (this.probe === void 0 && this.conn === void 0) {
        this.onClose({ reason: `${transport}: ${asError(e).message}` }, ti);
      }
      return void 0;
    }
  }
  /** The probe of a preferred transport opened: it becomes the connection. It subscribed
   *  with the cursors of the moment, and what the old connection delivered meanwhile is not
   *  delivered twice (cursors only move forward). */
  promote(probe, ti) {
    const old = this.conn;
    this.probe = void 0;
    this.conn = probe;
    old?.close();
    this.p.server.replaced(old, probe);
    this.p.retry.upgraded(ti);
    this.onOpen(ti, this.p.transports[ti]);
  }
  isWs(ti) {
    return this.p.transports[ti] === "websocket";
  }
  /** Whether transport `ti` has something to connect for: a topic (the kept personal topic
   *  counts once the token is known); a WebSocket may open without any (the application
   *  may subscribe it). */
  mayConnect(ti) {
    return this.isWs(ti) || this.p.server.wanted().size > 0 || this.p.server.personalPending();
  }
  onOpen(ti, transport) {
    this.connOpenedAt = Date.now();
    this.everOpen = true;
    this.p.tokens.accepted();
    this.connTransport = ti;
    const changed = this._transport !== transport;
    this._transport = transport;
    this.setState("open");
    if (changed) this.p.events.emit("transport", transport);
    this.scheduleProbe();
  }
  onClose(info, ti) {
    clearTimeout(this.probeTimer);
    this.probe?.close();
    this.probe = void 0;
    this.p.subs.clearHints();
    if (this._closed) return;
    const openedAt = this.connOpenedAt;
    this.connOpenedAt = void 0;
    if (info.fatal) {
      const invalidToken = info.fatal.code === "invalid_token" || info.fatal.status === 401;
      if (invalidToken && this.p.tokens.retryRefused()) {
        this.setState("reconnecting");
        this.schedule(0);
        return;
      }
      this.p.events.emit("error", info.fatal);
      this.close();
      return;
    }
    this.p.events.emit("error", info.error ?? new Error(info.reason));
    if (info.tokenExpired) this.p.tokens.expired();
    const stable = openedAt !== void 0 && Date.now() - openedAt >= this.p.stableAfter;
    const delay = this.p.retry.closed(info, ti, stable);
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    this.schedule(delay);
  }
  schedule(delay) {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.connect(), delay);
  }
  /** While on a fallback, tries the transports before it every `upgradeInterval`. */
  scheduleProbe() {
    clearTimeout(this.probeTimer);
    if (this.connTransport === 0 || this._closed) return;
    this.probeTimer = setTimeout(() => this.startProbe(0), this.p.upgradeInterval);
  }
  startProbe(pi) {
    this.probeTimer = void 0;
    if (this._closed || !this.conn || this.probe || pi >= this.connTransport) return;
    if (this.p.server.wanted().size === 0 && !this.isWs(pi)) {
      this.scheduleProbe();
      return;
    }
    const probe = this.spawn(pi, this.url);
    if (probe) this.probe = probe;
    else this.scheduleProbe();
  }
  setState(s) {
    if (this._state === s) return;
    this._state = s;
    this.p.events.emit("state", s);
  }
};

// src/msgpack.ts
var MsgpackError = class extends Error {
  name = "MsgpackError";
};
var MAX_DEPTH = 100;
var utf8Decoder = new TextDecoder("utf-8", { fatal: true });
var utf8Encoder = new TextEncoder();
function decode(bytes) {
  const d = new Decoder(bytes);
  const v = d.value(0);
  if (d.pos !== bytes.length) throw new MsgpackError(`${bytes.length - d.pos} bytes after the value`);
  return v;
}
var Decoder = class {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  bytes;
  pos = 0;
  view;
  need(n) {
    const at = this.pos;
    if (at + n > this.bytes.length) throw new MsgpackError("truncated value");
    this.pos = at + n;
    return at;
  }
  u8() {
    return this.view.getUint8(this.need(1));
  }
  u16() {
    return this.view.getUint16(this.need(2));
  }
  u32() {
    return this.view.getUint32(this.need(4));
  }
  big(v) {
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  value(depth) {
    const b = this.u8();
    if (b <= 127) return b;
    if (b >= 224) return b - 256;
    if (b >= 128 && b <= 143) return this.map(b & 15, depth);
    if (b >= 144 && b <= 159) return this.array(b & 15, depth);
    if (b >= 160 && b <= 191) return this.str(b & 31);
    switch (b) {
      case 192:
        return null;
      case 194:
        return false;
      case 195:
        return true;
      case 196:
        return this.bin(this.u8());
      case 197:
        return this.bin(this.u16());
      case 198:
        return this.bin(this.u32());
      case 202:
        return this.view.getFloat32(this.need(4));
      case 203:
        return this.view.getFloat64(this.need(8));
      case 204:
        return this.u8();
      case 205:
        return this.u16();
      case 206:
        return this.u32();
      case 207:
        return this.big(this.view.getBigUint64(this.need(8)));
      case 208:
        return this.view.getInt8(this.need(1));
      case 209:
        return this.view.getInt16(this.need(2));
      case 210:
        return this.view.getInt32(this.need(4));
      case 211:
        return this.big(this.view.getBigInt64(this.need(8)));
      case 217:
        return this.str(this.u8());
      case 218:
        return this.str(this.u16());
      case 219:
        return this.str(this.u32());
      case 220:
        return this.array(this.u16(), depth);
      case 221:
        return this.array(this.u32(), depth);
      case 222:
        return this.map(this.u16(), depth);
      case 223:
        return this.map(this.u32(), depth);
      case 199:
      case 200:
      case 201:
      case 212:
      case 213:
      case 214:
      case 215:
      case 216:
        throw new MsgpackError(`extension type 0x${b.toString(16)}: not read by this client`);
      default:
        throw new MsgpackError(`0x${b.toString(16)} is not a MessagePack type`);
    }
  }
  str(n) {
    const at = this.need(n);
    try {
      return utf8Decoder.decode(this.bytes.subarray(at, at + n));
    } catch {
      throw new MsgpackError("a string that is not UTF-8");
    }
  }
  bin(n) {
    const at = this.need(n);
    return this.bytes.slice(at, at + n);
  }
  array(n, depth) {
    if (depth >= MAX_DEPTH) throw new MsgpackError(`nested deeper than ${MAX_DEPTH}`);
    if (n > this.bytes.length - this.pos) throw new MsgpackError("truncated array");
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }
  map(n, depth) {
    if (depth >= MAX_DEPTH) throw new MsgpackError(`nested deeper than ${MAX_DEPTH}`);
    if (2 * n > this.bytes.length - this.pos) throw new MsgpackError("truncated map");
    const out = {};
    for (let i = 0; i < n; i++) {
      const k = this.value(depth + 1);
      if (typeof k !== "string") throw new MsgpackError("a map key that is not a string");
      const v = this.value(depth + 1);
      if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
      else out[k] = v;
    }
    return out;
  }
};
function encode(value) {
  const e = new Encoder();
  e.value(value, 0);
  return e.result();
}
var Encoder = class {
  buf = new Uint8Array(256);
  view = new DataView(this.buf.buffer);
  pos = 0;
  result() {
    return this.buf.slice(0, this.pos);
  }
  room(n) {
    if (this.pos + n > this.buf.length) {
      let size = this.buf.length * 2;
      while (size < this.pos + n) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.buf.subarray(0, this.pos));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.pos;
    this.pos += n;
    return at;
  }
  // `room` may replace `buf` and `view`: each write takes its offset first, then the buffer.
  byte(b) {
    const at = this.room(1);
    this.buf[at] = b;
  }
  head(n, fix, fixMax, c8, c16, c32) {
    if (fix !== void 0 && n <= fixMax) this.byte(fix | n);
    else if (c8 !== void 0 && n <= 255) {
      this.byte(c8);
      this.byte(n);
    } else if (n <= 65535) {
      this.tagged(c16, 2, (v, at) => v.setUint16(at, n));
    } else {
      this.tagged(c32, 4, (v, at) => v.setUint32(at, n));
    }
  }
  /** A tag byte, then `size` bytes that `write` writes (into the view of after `room`). */
  tagged(tag, size, write) {
    this.byte(tag);
    const at = this.room(size);
    write(this.view, at);
  }
  bytes(b) {
    const at = this.room(b.length);
    this.buf.set(b, at);
  }
  value(v, depth) {
    if (depth > 512) throw new TypeError("MessagePack: a cyclic or too deeply nested value");
    if (v !== null && typeof v === "object" && typeof v.toJSON === "function") {
      v = v.toJSON();
    }
    switch (typeof v) {
      case "boolean":
        this.byte(v ? 195 : 194);
        return;
      case "number":
        this.number(v);
        return;
      case "bigint":
        this.bigint(v);
        return;
      case "string": {
        const b = utf8Encoder.encode(v);
        this.head(b.length, 160, 31, 217, 218, 219);
        this.bytes(b);
        return;
      }
      case "object":
        if (v === null) break;
        if (v instanceof Uint8Array || v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
          const b = v instanceof Uint8Array ? v : v instanceof ArrayBuffer ? new Uint8Array(v) : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
          this.head(b.length, void 0, 0, 196, 197, 198);
          this.bytes(b);
          return;
        }
        if (Array.isArray(v)) {
          this.head(v.length, 144, 15, void 0, 220, 221);
          for (const x of v) this.value(x, depth + 1);
          return;
        }
        this.object(v, depth);
        return;
      default:
        break;
    }
    this.byte(192);
  }
  object(o, depth) {
    const entries = Object.keys(o).map((k) => [k, o[k]]).filter(([, x]) => x !== void 0 && typeof x !== "function" && typeof x !== "symbol");
    this.head(entries.length, 128, 15, void 0, 222, 223);
    for (const [k, x] of entries) {
      this.value(k, depth + 1);
      this.value(x, depth + 1);
    }
  }
  number(n) {
    if (!Number.isFinite(n)) {
      this.byte(192);
      return;
    }
    if (!Number.isSafeInteger(n)) {
      this.tagged(203, 8, (v, at) => v.setFloat64(at, n));
      return;
    }
    if (n >= 0) {
      if (n <= 127) this.byte(n);
      else if (n <= 255) {
        this.byte(204);
        this.byte(n);
      } else if (n <= 65535) {
        this.tagged(205, 2, (v, at) => v.setUint16(at, n));
      } else if (n <= 4294967295) {
        this.tagged(206, 4, (v, at) => v.setUint32(at, n));
      } else {
        this.tagged(207, 8, (v, at) => v.setBigUint64(at, BigInt(n)));
      }
    } else if (n >= -32) {
      this.byte(n & 255);
    } else if (n >= -128) {
      this.tagged(208, 1, (v, at) => v.setInt8(at, n));
    } else if (n >= -32768) {
      this.tagged(209, 2, (v, at) => v.setInt16(at, n));
    } else if (n >= -2147483648) {
      this.tagged(210, 4, (v, at) => v.setInt32(at, n));
    } else {
      this.tagged(211, 8, (v, at) => v.setBigInt64(at, BigInt(n)));
    }
  }
  bigint(n) {
    if (n >= 0n && n < 1n << 64n) {
      if (n <= BigInt(Number.MAX_SAFE_INTEGER)) return this.number(Number(n));
      this.tagged(207, 8, (v, at) => v.setBigUint64(at, n));
    } else if (n < 0n && n >= -(1n << 63n)) {
      if (n >= BigInt(Number.MIN_SAFE_INTEGER)) return this.number(Number(n));
      this.tagged(211, 8, (v, at) => v.setBigInt64(at, n));
    } else {
      throw new TypeError("MessagePack: a bigint out of 64 bits");
    }
  }
};

// src/wire.ts
var WS_MSGPACK = "herald.msgpack";
var ProtocolError = class extends Error {
  /** For `error` listeners: always `protocol_error`. */
  code = "protocol_error";
  name = "ProtocolError";
};
function isObj(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}
function str(o, k, what) {
  const v = o[k];
  if (typeof v !== "string") throw new ProtocolError(`${what}: "${k}" is not a string`);
  return v;
}
function strings(v) {
  return Array.isArray(v) ? v.filter((x) => typeof x === "string") : [];
}
function stringMap(v) {
  const out = {};
  if (!isObj(v)) return out;
  for (const [k, c] of Object.entries(v)) if (typeof c === "string") out[k] = c;
  return out;
}
function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    const head = text.length > 60 ? `${text.slice(0, 60)}\u2026` : text;
    throw new ProtocolError(`${what}: not JSON (${e.message}): ${head}`);
  }
}
function parseObject(text, what) {
  const v = parseJson(text, what);
  if (!isObj(v)) throw new ProtocolError(`${what}: not a JSON object`);
  return v;
}
function toMessage(f, what = "message") {
  if (!isObj(f) || f.type !== "message") throw new ProtocolError(`${what}: not a message object`);
  const m = { topic: str(f, "topic", what), id: str(f, "id", what), data: f.data };
  if (f.event !== void 0 && f.event !== null) m.event = str(f, "event", what);
  if (f.delta === true) deltaMessages.add(m);
  return m;
}
function topicsOf(data, what) {
  return strings(parseObject(data, what).topics);
}
function loadWsFrame(raw, format) {
  if (format === "json") {
    if (typeof raw !== "string") throw new ProtocolError("ws: a binary frame on a JSON connection");
    return parseJson(raw, "ws frame");
  }
  const bytes = raw instanceof ArrayBuffer ? new Uint8Array(raw) : ArrayBuffer.isView(raw) ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) : void 0;
  if (!bytes) throw new ProtocolError("ws: a text frame on a herald.msgpack connection");
  try {
    return decode(bytes);
  } catch (e) {
    if (e instanceof MsgpackError) throw new ProtocolError(`ws frame: not MessagePack: ${e.message}`);
    throw e;
  }
}
function readWsFrame(f) {
  if (!isObj(f)) throw new ProtocolError("ws frame: not an object");
  const what = `ws ${typeof f.type === "string" ? f.type : "frame"}`;
  switch (f.type) {
    case "message":
      return { type: "message", message: toMessage(f, what) };
    case "lost":
      return { type: "lost", topic: str(f, "topic", what), reason: str(f, "reason", what) };
    case "subscribed":
      return { type: "subscribed", topics: strings(f.topics), cursors: stringMap(f.cursors), byServer: f.by === "server" };
    case "unsubscribed":
      return { type: "unsubscribed", topics: strings(f.topics), byServer: f.by === "server" };
    case "published":
      return { type: "published", id: str(f, "id", what), topic: str(f, "topic", what) };
    case "authenticated":
    case "pong":
    case "heartbeat":
      return { type: "reply" };
    case "error":
      return { type: "error", code: String(f.code), reason: String(f.reason) };
    default:
      if (typeof f.type !== "string") throw new ProtocolError("ws frame: no type");
      return { type: "other" };
  }
}
function encodeWsFrame(frame, format) {
  return format === "msgpack" ? encode(frame) : JSON.stringify(frame);
}
function decodeSseMessage(data) {
  return toMessage(parseJson(data, "sse message"), "sse message");
}
function decodeSseLost(data) {
  const o = parseObject(data, "sse herald.lost");
  return { topic: str(o, "topic", "sse herald.lost"), reason: str(o, "reason", "sse herald.lost") };
}
function decodeSseShutdown(data) {
  const o = parseObject(data, "sse herald.shutdown");
  return typeof o.retry_ms === "number" ? { retryMs: o.retry_ms } : {};
}
function decodeSseDisconnect(data) {
  const o = parseObject(data, "sse herald.disconnect");
  const out = {};
  if (typeof o.reason === "string") out.reason = o.reason;
  if (typeof o.reconnect === "boolean") out.reconnect = o.reconnect;
  return out;
}
function decodePollAnswer(text) {
  const o = parseObject(text, "poll answer");
  const messages = o.messages ?? [];
  if (!Array.isArray(messages)) throw new ProtocolError("poll answer: messages is not an array");
  const lostIn = o.lost ?? [];
  if (!Array.isArray(lostIn)) throw new ProtocolError("poll answer: lost is not an array");
  const lost = lostIn.map((l) => {
    if (!isObj(l)) throw new ProtocolError("poll answer: a loss that is not an object");
    return { topic: str(l, "topic", "poll loss"), reason: str(l, "reason", "poll loss") };
  });
  let disconnect;
  if (isObj(o.disconnect)) {
    disconnect = {
      reason: typeof o.disconnect.reason === "string" ? o.disconnect.reason : "disconnected",
      reconnect: o.disconnect.reconnect !== false
    };
  }
  if (o.cursor !== void 0 && o.cursor !== null && typeof o.cursor !== "string") {
    throw new ProtocolError("poll answer: cursor is not a string");
  }
  return {
    messages: messages.map((m) => toMessage(m, "poll message")),
    lost,
    cursor: typeof o.cursor === "string" ? o.cursor : void 0,
    disconnect
  };
}
function decodeHistory(text) {
  const o = parseObject(text, "history");
  if (!Array.isArray(o.messages)) throw new ProtocolError("history: messages is not an array");
  return {
    topic: str(o, "topic", "history"),
    messages: o.messages.map((m) => toMessage(m, "history message")),
    lost: typeof o.lost === "string" ? o.lost : void 0,
    more: o.more === true,
    next: typeof o.next === "string" ? o.next : void 0
  };
}

// src/watchdog.ts
var Watchdog = class {
  /** `timeout` 0 (or less): never. */
  constructor(timeout, dead, idle) {
    this.timeout = timeout;
    this.dead = dead;
    this.idle = idle;
    if (timeout > 0) this.arm(timeout / 2);
    else this.stopped = true;
  }
  timeout;
  dead;
  idle;
  last = Date.now();
  pinged = false;
  timer;
  stopped = false;
  /** Something arrived. Cheap: called for every chunk and frame. */
  feed() {
    this.last = Date.now();
    this.pinged = false;
  }
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = void 0;
  }
  arm(ms) {
    this.timer = setTimeout(() => this.check(), Math.max(1, ms));
  }
  check() {
    this.timer = void 0;
    if (this.stopped) return;
    const silent = Date.now() - this.last;
    if (silent >= this.timeout) {
      this.stop();
      this.dead(silent);
      return;
    }
    const half = this.timeout / 2;
    if (silent >= half && !this.pinged) {
      this.pinged = true;
      this.idle?.();
      if (this.stopped) return;
    }
    this.arm(silent >= half ? this.timeout - silent : half - silent);
  }
};

// src/websocket.ts
var MAX_PENDING = 1024;
var FATAL_SUBSCRIBE = /* @__PURE__ */ new Set([
  "forbidden",
  "bad_topic",
  "too_many_topics",
  "bad_cursor",
  "invalid_token",
  "bad_delta",
  "delta_not_allowed"
]);
function frameBytes(raw) {
  if (raw instanceof ArrayBuffer) return new Uint8Array(raw);
  if (ArrayBuffer.isView(raw)) return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  throw new ProtocolError("ws: not a binary frame");
}
function wsUrl(base, token, batch = false) {
  const u = new URL("/v1/ws", base);
  u.protocol = u.protocol === "https:" ? "wss:" : u.protocol === "http:" ? "ws:" : u.protocol;
  if (token) u.searchParams.set("token", token);
  if (batch) u.searchParams.set("batch", "1");
  return u.toString();
}
var WsConnection = class {
  constructor(ctx, handlers) {
    this.ctx = ctx;
    this.handlers = handlers;
    this.bases = new Bases((t) => ctx.delta(t), decode);
    const WS = ctx.WebSocket;
    if (!WS) throw new Error("no WebSocket implementation");
    const url = wsUrl(ctx.url, ctx.token(), ctx.batch);
    const protocols = ctx.format === "msgpack" ? [WS_MSGPACK] : [];
    this.socket = ctx.perMessageDeflate ? new WS(url, protocols) : new WS(url, protocols, { perMessageDeflate: false });
    try {
      this.socket.binaryType = "arraybuffer";
    } catch {
    }
    this.openTimer = setTimeout(
      () => this.fail({ reason: `WebSocket not open after ${ctx.openTimeout} ms` }),
      ctx.openTimeout
    );
    this.socket.onopen = () => {
      if (this.closed) return;
      if (ctx.format === "msgpack" && this.socket.protocol !== WS_MSGPACK) {
        this.fail({
          reason: "ws: the gateway did not accept the herald.msgpack subprotocol",
          error: new ProtocolError("ws: the gateway did not accept the herald.msgpack subprotocol")
        });
        return;
      }
      this.watchdog = new Watchdog(
        ctx.deadTimeout,
        (ms) => this.fail({ reason: `ws: nothing received for ${ms} ms (no heartbeat): the connection is dead` }, true),
        () => this.ping()
      );
      if (this.ctx.topics().size === 0) this.markOpen();
      else this.update();
    };
    this.socket.onmessage = (ev) => this.onFrame(ev.data);
    this.socket.onclose = (ev) => this.onClose(ev.code, ev.reason);
    this.socket.onerror = () => {
    };
  }
  ctx;
  handlers;
  transport = "websocket";
  socket;
  closed = false;
  opened = false;
  /** Topics subscribed or asked for. */
  requested = /* @__PURE__ */ new Set();
  /** Topics the application subscribed this connection to (`"by": "server"`), not asked for. */
  byServer = /* @__PURE__ */ new Set();
  pending = [];
  openTimer;
  watchdog;
  /** The base of each topic that asked for deltas: its last message's data on this connection. */
  bases;
  /** Topics whose delta did not apply, unsubscribed and subscribed again from their cursors:
   *  what comes for them before the `unsubscribed` reply is of the old subscription, dropped. */
  resyncing = /* @__PURE__ */ new Set();
  update() {
    if (this.closed || this.socket.readyState !== 1) return;
    const wanted = this.ctx.topics();
    const subscribe = [...wanted.keys()].filter((t) => !this.requested.has(t) && !this.byServer.has(t));
    const unsubscribe = [...this.requested].filter((t) => !wanted.has(t));
    const held = [...this.requested].filter((t) => wanted.has(t));
    const resume = [...this.ctx.patternCursors()].filter(([t]) => !matchedBy(held, t));
    const frames = [];
    for (const t of subscribe) {
      const c = wanted.get(t);
      const pattern = isPattern(t);
      const last = c === void 0 && !pattern ? this.ctx.last(t) : void 0;
      const delta = this.ctx.delta(t);
      let frame = c === void 0 && !pattern ? frames.find((f) => f.last === last && f.delta === delta) : frames.find((f) => f.delta === delta);
      if (!frame) {
        frame = { last, delta, topics: [], cursors: {} };
        frames.push(frame);
      }
      frame.topics.push(t);
      if (c !== void 0) frame.cursors[t] = c;
      if (pattern) {
        for (const [rt, rc] of resume) if (matchesPattern(t, rt)) frame.cursors[rt] = rc;
      }
      this.requested.add(t);
      this.bases.drop(t);
    }
    for (const { last, delta, topics, cursors } of frames) {
      const f = { type: "subscribe", topics, cursors };
      if (last !== void 0) f.last = last;
      if (delta) f.delta = "fossil";
      this.send(f, { kind: "subscribe", topics });
    }
    if (unsubscribe.length > 0) {
      for (const t of unsubscribe) {
        this.requested.delete(t);
        this.bases.drop(t);
      }
      this.send({ type: "unsubscribe", topics: unsubscribe }, { kind: "unsubscribe", topics: unsubscribe });
    }
  }
  refreshToken(token) {
    if (this.closed || this.socket.readyState !== 1) return;
    this.send({ type: "auth", token }, { kind: "auth" });
  }
  publish(topic, data, event) {
    return new Promise((resolve, reject) => {
      if (this.closed || this.socket.readyState !== 1) {
        reject(new Error("the WebSocket is not open"));
        return;
      }
      if (this.pending.length >= MAX_PENDING) {
        reject(new HeraldError(0, "too_many_pending", `more than ${MAX_PENDING} commands await a reply`));
        return;
      }
      const frame = { type: "publish", topic, data };
      if (event !== void 0) frame.event = event;
      try {
        this.send(frame, { kind: "publish", resolve, reject });
      } catch (e) {
        reject(asError(e));
      }
    });
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    this.cleanup("the connection was closed");
    try {
      this.socket.close(1e3);
    } catch {
    }
  }
  send(frame, pending) {
    const data = encodeWsFrame(frame, this.ctx.format);
    this.pending.push(pending);
    this.socket.send(data);
  }
  /** Asks for a sign of life (the `pong`) on a silent connection. */
  ping() {
    if (this.closed || this.socket.readyState !== 1 || this.pending.length >= MAX_PENDING) return;
    try {
      this.send({ type: "ping" }, { kind: "ping" });
    } catch {
    }
  }
  markOpen() {
    if (this.opened) return;
    this.opened = true;
    clearTimeout(this.openTimer);
    this.handlers.open();
  }
  onFrame(raw) {
    if (this.closed) return;
    this.watchdog?.feed();
    let v;
    try {
      v = loadWsFrame(raw, this.ctx.format);
    } catch (e) {
      this.malformed(e);
      return;
    }
    const json = this.ctx.format === "json";
    if (!Array.isArray(v)) {
      this.onValue(v, json ? () => raw : () => frameBytes(raw));
      return;
    }
    this.handlers.batch();
    let parts;
    const split = () => parts ??= json ? jsonArrayTexts(raw) : msgpackArrayItems(frameBytes(raw));
    for (let i = 0; i < v.length && !this.closed; i++) {
      const at = i;
      this.onValue(
        v[i],
        () => {
          const part = split()[at];
          if (part === void 0) throw new DeltaError(`batch: element ${at} not found in the frame`);
          return part;
        },
        ` (element ${i + 1} of a batch of ${v.length})`
      );
    }
  }
  /** A frame's value is not what the gateway sends: the stream cannot be trusted past it.
   *  Reconnect from the cursors (what it held is asked for again), and say so. */
  malformed(e, where = "") {
    let error = e instanceof ProtocolError ? e : new ProtocolError(`ws frame: ${asError(e).message}`);
    if (where) error = new ProtocolError(`${error.message}${where}`);
    this.fail({ reason: `ws: malformed frame: ${error.message}`, error }, true);
  }
  /** One frame, alone or an element of a batch (`where` says which, for errors). */
  onValue(v, rawFrame, where = "") {
    let f;
    try {
      f = readWsFrame(v);
    } catch (e) {
      this.malformed(e, where);
      return;
    }
    switch (f.type) {
      case "message": {
        const m = f.message;
        if (this.resyncing.has(m.topic)) break;
        let delta;
        try {
          delta = this.ctx.format === "json" ? this.bases.json(m, rawFrame) : this.bases.msgpack(m, rawFrame);
        } catch (e) {
          if (!(e instanceof DeltaError)) throw e;
          this.resubscribe(m.topic, e);
          break;
        }
        if (delta) this.handlers.delta(m.topic);
        this.handlers.message(m);
        break;
      }
      case "lost":
        this.bases.drop(f.topic);
        this.handlers.lost({ topic: f.topic, reason: f.reason });
        break;
      case "subscribed": {
        if (f.byServer) {
          const topics = f.topics.filter((t) => !this.requested.has(t));
          for (const t of topics) this.byServer.add(t);
          if (topics.length > 0) this.handlers.serverSubscribed(topics);
          for (const [t, c] of Object.entries(f.cursors)) this.handlers.position(t, c);
          break;
        }
        this.pending.shift();
        for (const [t, c] of Object.entries(f.cursors)) this.handlers.position(t, c);
        this.markOpen();
        break;
      }
      case "published": {
        const p = this.pending.shift();
        p?.resolve?.({ id: f.id, topic: f.topic });
        break;
      }
      case "unsubscribed":
        if (f.byServer) {
          for (const t of f.topics) {
            this.byServer.delete(t);
            this.requested.delete(t);
            this.bases.drop(t);
          }
          if (f.topics.length > 0) this.handlers.serverUnsubscribed(f.topics, false);
          break;
        }
        this.pending.shift()?.done?.();
        break;
      case "reply":
        this.pending.shift();
        break;
      case "error": {
        const p = this.pending.shift();
        const err = new HeraldError(0, f.code, f.reason);
        if (p?.kind === "publish") {
          p.reject?.(err);
        } else if (p?.kind === "subscribe" || p?.kind === "auth") {
          if (FATAL_SUBSCRIBE.has(err.code) || p.kind === "auth") this.fail({ reason: err.message, fatal: err });
          else this.fail({ reason: err.message });
        }
        break;
      }
      case "other":
        break;
    }
  }
  /** A delta of `topic` did not apply: nothing of it is delivered; the topic is unsubscribed
   *  and subscribed again from its cursor (the last message delivered), so the message comes
   *  again in full (docs/protocol.md "When a delta does not apply"). */
  resubscribe(topic, error) {
    this.handlers.delta(topic, error);
    this.bases.drop(topic);
    const cursor = this.ctx.topics().get(topic);
    if (!this.requested.has(topic) || cursor === void 0 || this.pending.length + 2 > MAX_PENDING) {
      this.fail({ reason: `ws: a delta of ${topic} did not apply: ${error.message}`, error }, true);
      return;
    }
    this.resyncing.add(topic);
    try {
      this.send({ type: "unsubscribe", topics: [topic] }, { kind: "unsubscribe", topics: [topic], done: () => this.resyncing.delete(topic) });
      this.send(
        { type: "subscribe", topics: [topic], cursors: { [topic]: cursor }, delta: "fossil" },
        { kind: "subscribe", topics: [topic] }
      );
    } catch (e) {
      this.fail({ reason: `ws: ${asError(e).message}` }, true);
    }
  }
  onClose(code, reason) {
    if (this.closed) return;
    const info = { reason: `WebSocket closed: ${code}${reason ? ` ${reason}` : ""}` };
    if (code === 1012) info.shutdown = true;
    if (code === 1008 && reason === "token expired") info.tokenExpired = true;
    if (code === 4001) info.fatal = new HeraldError(0, "disconnected", reason || "disconnected");
    this.fail(info);
  }
  /** Ends the connection with `info`. `abandon`: the peer went silent or sent what the
   *  gateway never sends, so no answer to a close is to be waited for: the socket is dropped
   *  at once where the implementation can (`terminate()`, as Node's `ws` has; undici's
   *  WebSocket would wait for the closing handshake for ever, a browser's times it out). */
  fail(info, abandon = false) {
    if (this.closed) return;
    this.closed = true;
    this.cleanup(info.reason);
    const socket = this.socket;
    try {
      if (abandon && typeof socket.terminate === "function") socket.terminate();
      else socket.close(1e3);
    } catch {
    }
    this.handlers.close(info);
  }
  cleanup(reason) {
    clearTimeout(this.openTimer);
    this.watchdog?.stop();
    const pending = this.pending;
    this.pending = [];
    for (const p of pending) p.reject?.(new Error(reason));
  }
};

// src/http.ts
var MAX_ANSWER = 1 << 22;
async function readText(res, max, what) {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (; ; ) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (text.length > max) {
      await reader.cancel().catch(() => {
      });
      throw new ProtocolError(`${what}: longer than ${max} characters`);
    }
  }
  return text + decoder.decode();
}
async function refusal(res, what) {
  let code = `http_${res.status}`;
  let reason = `${what} answered ${res.status}`;
  try {
    const body = await res.json();
    if (typeof body.code === "string") code = body.code;
    if (typeof body.reason === "string") reason = body.reason;
  } catch {
  }
  const info = { reason: `${what}: ${res.status} ${code}: ${reason}` };
  const after = Number(res.headers.get("retry-after"));
  if (Number.isFinite(after) && after > 0) info.retryMs = after * 1e3;
  if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
    info.fatal = new HeraldError(res.status, code, reason);
  }
  return info;
}
function headers(ctx, extra = {}) {
  const h = { ...extra };
  const token = ctx.token();
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}
function topicQuery(ctx, topics) {
  const q = new URLSearchParams();
  let last;
  for (const [t, c] of topics) {
    q.append("topic", t);
    const n = c === void 0 ? ctx.last(t) : void 0;
    if (n !== void 0 && (last === void 0 || n > last)) last = n;
  }
  if (last !== void 0) q.set("last", String(last));
  q.set("format", "json");
  if (topics.size > 0 && [...topics.keys()].every((t) => ctx.delta(t))) q.set("delta", "fossil");
  return q;
}
async function publishOverHttp(base, message, auth, f, credentials) {
  const body = { topic: message.topic, data: message.data };
  if (message.event !== void 0) body.event = message.event;
  const headers2 = { "content-type": "application/json" };
  if (auth.token) headers2.authorization = `Bearer ${auth.token}`;
  if (auth.apiKey) headers2["x-api-key"] = auth.apiKey;
  const res = await f(new URL("/v1/publish", base), {
    method: "POST",
    headers: headers2,
    body: JSON.stringify(body),
    credentials
  });
  if (!res.ok) {
    const info = await refusal(res, "publish");
    throw info.fatal ?? new HeraldError(res.status, `http_${res.status}`, info.reason);
  }
  return await res.json();
}
async function historyOverHttp(base, topic, query, token, f, credentials) {
  const url = new URL(`/v1/topics/${encodeURIComponent(topic)}/history`, base);
  if (query.limit !== void 0) url.searchParams.set("limit", String(query.limit));
  if (query.since !== void 0) url.searchParams.set("since", query.since);
  const h = { accept: "application/json" };
  if (token) h.authorization = `Bearer ${token}`;
  const res = await f(url, { headers: h, cache: "no-store", credentials });
  if (!res.ok) {
    const info = await refusal(res, "history");
    throw info.fatal ?? new HeraldError(res.status, `http_${res.status}`, info.reason);
  }
  return decodeHistory(await readText(res, MAX_ANSWER, "history"));
}
var HttpConnection = class {
  constructor(ctx, handlers) {
    this.ctx = ctx;
    this.handlers = handlers;
    queueMicrotask(() => this.restart());
  }
  ctx;
  handlers;
  closed = false;
  opened = false;
  abort;
  /** Bumped on every (re)start; a request of an older generation reports nothing. */
  generation = 0;
  update() {
    if (!this.closed) this.restart();
  }
  refreshToken(_token) {
  }
  close() {
    this.closed = true;
    this.abort?.abort();
  }
  restart() {
    if (this.closed) return;
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    const gen = ++this.generation;
    this.run(gen, abort.signal).catch((e) => {
      if (this.current(gen)) this.fail({ reason: `${this.transport}: ${asError(e).message}` });
    });
  }
  current(gen) {
    return !this.closed && gen === this.generation;
  }
  markOpen() {
    if (this.opened) return;
    this.opened = true;
    this.handlers.open();
  }
  fail(info) {
    if (this.closed) return;
    this.closed = true;
    this.abort?.abort();
    this.handlers.close(info);
  }
};

// src/sse.ts
var SSE_DEFAULT_HEARTBEAT = 15;
function sseHeartbeat(deadTimeout) {
  return Math.max(1, Math.floor(deadTimeout / 2e3));
}
var SseLineTooLong = class extends Error {
};
var SseParser = class {
  /** `maxLine`: the longest line accepted, in UTF-16 code units (bounds the buffer). */
  constructor(handlers, maxLine = 1 << 22) {
    this.handlers = handlers;
    this.maxLine = maxLine;
  }
  handlers;
  maxLine;
  buffer = "";
  data = [];
  size = 0;
  event = "";
  id;
  sawCr = false;
  push(chunk) {
    let text = chunk;
    if (this.sawCr && text.startsWith("\n")) text = text.slice(1);
    this.sawCr = false;
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 10 || c === 13) {
        this.line(this.buffer + text.slice(start, i));
        this.buffer = "";
        if (c === 13) {
          if (i + 1 < text.length) {
            if (text.charCodeAt(i + 1) === 10) i++;
          } else {
            this.sawCr = true;
          }
        }
        start = i + 1;
      }
    }
    this.buffer += text.slice(start);
    if (this.buffer.length > this.maxLine) {
      throw new SseLineTooLong(`an event-stream line is longer than ${this.maxLine} characters`);
    }
  }
  line(line) {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "data":
        this.size += value.length + 1;
        if (this.size > this.maxLine) {
          throw new SseLineTooLong(`an event is longer than ${this.maxLine} characters`);
        }
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.handlers.retry?.(Number(value));
        break;
      default:
        break;
    }
  }
  dispatch() {
    const id = this.id;
    const data = this.data;
    const event = this.event;
    this.id = void 0;
    this.data = [];
    this.size = 0;
    this.event = "";
    if (data.length === 0) {
      if (id !== void 0) this.handlers.id?.(id);
      return;
    }
    const e = { event: event || "message", data: data.join("\n") };
    if (id !== void 0) e.id = id;
    this.handlers.event(e);
  }
};
var SseConnection = class extends HttpConnection {
  transport = "sse";
  /** Topics the current stream was asked for. */
  asked = /* @__PURE__ */ new Set();
  /** Topics the application subscribed the current stream to (`herald.subscribed`, a
   *  connect hook's topics in the opening id). */
  byServer = /* @__PURE__ */ new Set();
  /** Whether to ask for a heartbeat: false once the gateway refused the one asked for
   *  (`bad_heartbeat`: outside its bounds); then its default is waited for. */
  askHeartbeat = true;
  refreshToken(_token) {
    this.restart();
  }
  update() {
    if (this.closed) return;
    const wanted = this.ctx.topics();
    const held = (t) => this.asked.has(t) || this.byServer.has(t);
    if ([...wanted.keys()].every(held) && [...this.asked].every((t) => wanted.has(t))) return;
    this.restart();
  }
  /** Topics named by the server that this stream did not ask for and did not know (those
   *  its patterns deliver are the client's own). */
  serverNew(topics) {
    const added = [...topics].filter((t) => !this.asked.has(t) && !this.byServer.has(t) && !matchedBy(this.asked, t));
    for (const t of added) this.byServer.add(t);
    return added;
  }
  async run(gen, signal) {
    const topics = this.ctx.topics();
    const ended = [...this.byServer].filter((t) => !topics.has(t));
    this.byServer.clear();
    this.asked = new Set(topics.keys());
    if (ended.length > 0) this.handlers.serverUnsubscribed(ended, true);
    if (!this.current(gen)) return;
    const query = topicQuery(this.ctx, topics);
    const deadTimeout = this.ctx.deadTimeout;
    const ask = deadTimeout > 0 && this.askHeartbeat;
    if (ask) query.set("heartbeat", String(sseHeartbeat(deadTimeout)));
    const url = new URL(`/v1/sse?${query}`, this.ctx.url);
    const resume = formatResumeList([...topics, ...this.ctx.patternCursors()]);
    let openTimer = setTimeout(() => {
      if (this.current(gen)) this.fail({ reason: `sse: no opening block within ${this.ctx.openTimeout} ms (buffered by a proxy?)` });
    }, this.ctx.openTimeout);
    const stopTimer = () => {
      clearTimeout(openTimer);
      openTimer = void 0;
    };
    let watchdog;
    try {
      const res = await this.ctx.fetch(url, {
        headers: headers(this.ctx, resume ? { accept: "text/event-stream", "last-event-id": resume } : { accept: "text/event-stream" }),
        cache: "no-store",
        credentials: this.ctx.credentials,
        signal
      });
      if (!this.current(gen)) return;
      if (!res.ok || !res.body) {
        const info2 = await refusal(res, "sse");
        if (!this.current(gen)) return;
        if (ask && info2.fatal?.code === "bad_heartbeat") {
          stopTimer();
          this.askHeartbeat = false;
          this.restart();
          return;
        }
        stopTimer();
        this.fail(info2);
        return;
      }
      const dead = ask || deadTimeout <= 0 ? deadTimeout : Math.max(deadTimeout, 2 * SSE_DEFAULT_HEARTBEAT * 1e3 + 5e3);
      watchdog = new Watchdog(dead, (ms) => {
        if (this.current(gen)) this.fail({ reason: `sse: nothing received for ${ms} ms (no heartbeat): the connection is dead` });
      });
      let retryMs;
      let sawOpening = false;
      const bases = new Bases((t) => this.ctx.delta(t));
      let ending;
      const parser = new SseParser({
        id: (id) => {
          if (!this.current(gen)) return;
          const positions = parseResumeList(id);
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
          if (sawOpening) retryMs = ms;
        },
        event: (e) => {
          if (!this.current(gen)) return;
          switch (e.event) {
            case "message": {
              const m = decodeSseMessage(e.data);
              let delta;
              try {
                delta = bases.json(m, () => e.data);
              } catch (err) {
                if (!(err instanceof DeltaError)) throw err;
                this.handlers.delta(m.topic, err);
                this.restart();
                return;
              }
              if (delta) this.handlers.delta(m.topic);
              this.handlers.message(m);
              break;
            }
            case "herald.lost": {
              const lost = decodeSseLost(e.data);
              bases.drop(lost.topic);
              const positions = e.id !== void 0 ? parseResumeList(e.id) : /* @__PURE__ */ new Map();
              this.handlers.lost({ topic: lost.topic, reason: lost.reason }, positions.get(lost.topic));
              for (const [t, c] of positions) if (t !== lost.topic) this.handlers.position(t, c);
              break;
            }
            case "herald.subscribed": {
              const added = this.serverNew(topicsOf(e.data, "sse herald.subscribed"));
              if (added.length > 0) this.handlers.serverSubscribed(added);
              if (e.id !== void 0) for (const [t, c] of parseResumeList(e.id)) this.handlers.position(t, c);
              break;
            }
            case "herald.unsubscribed": {
              const removed = topicsOf(e.data, "sse herald.unsubscribed");
              for (const t of removed) {
                this.byServer.delete(t);
                this.asked.delete(t);
              }
              if (removed.length > 0) this.handlers.serverUnsubscribed(removed, false);
              break;
            }
            case "herald.shutdown": {
              const s = decodeSseShutdown(e.data);
              ending = { reason: "sse: the node is draining", shutdown: true };
              if (s.retryMs !== void 0) ending.retryMs = s.retryMs;
              break;
            }
            case "herald.disconnect": {
              const d = decodeSseDisconnect(e.data);
              ending = { reason: `sse: disconnected: ${d.reason ?? "unknown"}` };
              if (d.reason === "token expired") ending.tokenExpired = true;
              if (d.reconnect === false) ending.fatal = new HeraldError(0, "disconnected", d.reason ?? "disconnected");
              break;
            }
            default:
              break;
          }
        }
      });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (; ; ) {
        const { done, value } = await reader.read();
        if (!this.current(gen)) {
          await reader.cancel().catch(() => {
          });
          return;
        }
        if (done) break;
        watchdog.feed();
        try {
          parser.push(decoder.decode(value, { stream: true }));
        } catch (e) {
          if (!this.current(gen)) return;
          const error = e instanceof ProtocolError ? e : new ProtocolError(`sse: ${asError(e).message}`);
          this.fail({ reason: `sse: malformed event: ${error.message}`, error });
          await reader.cancel().catch(() => {
          });
          return;
        }
      }
      stopTimer();
      if (!this.current(gen)) return;
      const info = ending ?? { reason: "sse: the stream ended" };
      if (info.retryMs === void 0 && retryMs !== void 0) info.retryMs = retryMs;
      this.fail(info);
    } finally {
      stopTimer();
      watchdog?.stop();
    }
  }
};

// src/poll.ts
var PollConnection = class extends HttpConnection {
  transport = "poll";
  /** Positions of topics the polls did not ask for but the answers named (a connect hook's):
   *  sent back in `cursor` so that the next poll goes on from them. */
  byServer = /* @__PURE__ */ new Map();
  /** Topics the current poll asked for. */
  asked = /* @__PURE__ */ new Set();
  update() {
    if (this.closed) return;
    const wanted = this.ctx.topics();
    if (wanted.size === this.asked.size && [...wanted.keys()].every((t) => this.asked.has(t))) return;
    this.restart();
  }
  async run(gen, signal) {
    let first = true;
    while (this.current(gen)) {
      const topics = this.ctx.topics();
      this.asked = new Set(topics.keys());
      const q = topicQuery(this.ctx, topics);
      q.set("timeout", first ? "0" : String(this.ctx.pollTimeout));
      const cursors = new Map(topics);
      for (const [t, c] of [...this.ctx.patternCursors(), ...this.byServer]) if (!cursors.has(t)) cursors.set(t, c);
      const resume = formatResumeList(cursors);
      if (resume) q.set("cursor", resume);
      const url = new URL(`/v1/poll?${q}`, this.ctx.url);
      const limit = (first ? 0 : this.ctx.pollTimeout * 1e3) + this.ctx.openTimeout;
      const timer = setTimeout(() => {
        if (this.current(gen)) this.fail({ reason: `poll: no answer within ${limit} ms` });
      }, limit);
      let res;
      let body;
      let text;
      try {
        res = await this.ctx.fetch(url, {
          headers: headers(this.ctx, { accept: "application/json" }),
          cache: "no-store",
          credentials: this.ctx.credentials,
          signal
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
          this.fail({ reason: `poll: malformed answer: ${e.message}`, error: e });
          return;
        }
      } finally {
        clearTimeout(timer);
      }
      if (!this.current(gen)) return;
      const positions = body.cursor !== void 0 ? parseResumeList(body.cursor) : /* @__PURE__ */ new Map();
      const own = (t) => topics.has(t) || matchedBy(topics.keys(), t);
      const added = [];
      const gone = [];
      for (const [t, c] of positions) {
        if (own(t)) continue;
        if (!this.byServer.has(t)) added.push(t);
        this.byServer.set(t, c);
      }
      for (const t of [...this.byServer.keys()]) {
        if (own(t)) this.byServer.delete(t);
        else if (!positions.has(t)) gone.push(t);
      }
      for (const t of gone) this.byServer.delete(t);
      if (gone.length > 0) this.handlers.serverUnsubscribed(gone, false);
      if (added.length > 0) this.handlers.serverSubscribed(added);
      if (!this.current(gen)) return;
      const messages = body.messages;
      const withMessages = new Set(messages.map((m) => m.topic));
      for (const l of body.lost) {
        this.handlers.lost({ topic: l.topic, reason: l.reason }, withMessages.has(l.topic) ? void 0 : positions.get(l.topic));
      }
      const bases = new Bases((t) => this.ctx.delta(t));
      const failed = /* @__PURE__ */ new Set();
      let texts;
      for (let k = 0; k < messages.length; k++) {
        const m = messages[k];
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
      for (const [t, c] of positions) if (!failed.has(t)) this.handlers.position(t, c);
      first = false;
      this.markOpen();
      if (body.disconnect) {
        const reason = body.disconnect.reason;
        const info = { reason: `poll: disconnected: ${reason}` };
        if (!body.disconnect.reconnect) info.fatal = new HeraldError(0, "disconnected", reason);
        this.fail(info);
        return;
      }
    }
  }
};

// src/transports.ts
var TRANSPORTS = ["websocket", "sse", "poll"];
function openConnection(transport, ctx, handlers) {
  switch (transport) {
    case "websocket":
      return new WsConnection(ctx, handlers);
    case "sse":
      return new SseConnection(ctx, handlers);
    case "poll":
      return new PollConnection(ctx, handlers);
  }
}

// src/herald.ts
var Herald = class {
  constructor(url, options = {}) {
    this.options = options;
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
    for (const k of ["batch", "perMessageDeflate"]) {
      if (options[k] !== void 0 && typeof options[k] !== "boolean") {
        throw new TypeError(`Herald: ${k} must be true or false, not ${String(options[k])}`);
      }
    }
    const deadTimeout = options.deadTimeout ?? 45e3;
    if (!(typeof deadTimeout === "number" && deadTimeout >= 0)) {
      throw new RangeError(`Herald: deadTimeout must be a number of ms >= 0, not ${String(deadTimeout)}`);
    }
    this.opts = {
      openTimeout: options.openTimeout ?? 1e4,
      pollTimeout: options.pollTimeout ?? 25,
      maxTopics: options.maxTopics ?? 64,
      credentials: options.credentials ?? "same-origin",
      format,
      deadTimeout,
      batch: options.batch ?? true,
      perMessageDeflate: options.perMessageDeflate ?? false
    };
    this.tokens = new TokenKeeper(
      options.token,
      options.tokenRefreshMargin ?? 3e4,
      (token) => this.link.current?.refreshToken(token),
      (e) => this.events.emit("error", e)
    );
    this.subs = new Subscriptions((topic) => this.server.held(topic), this.events);
    if (options.cursors) this.subs.seed(Object.entries(options.cursors));
    this.server = new ServerSubscriptions(
      options.personalTopic,
      this.subs,
      this.tokens,
      this.events,
      () => this.link.topicsChanged()
    );
    this.link = new Connector({
      urls,
      transports,
      upgradeInterval: options.upgradeInterval ?? 3e4,
      stableAfter: options.stableAfter ?? 5e3,
      retry: new Reconnects(urls.length, transports.length, options.backoff ?? {}, options.random ?? Math.random),
      subs: this.subs,
      server: this.server,
      tokens: this.tokens,
      events: this.events,
      open: (transport, url2, handlers) => this.open(transport, url2, handlers)
    });
    if (options.personalTopic === "always") this.link.topicsChanged();
    if (transports.length < wanted.length) {
      queueMicrotask(
        () => this.events.emit(
          "error",
          new Error(
            "Herald: no WebSocket here, so the websocket transport is skipped: pass options.WebSocket (in Node 20, `WebSocket` of the `ws` package, or run node with --experimental-websocket)"
          )
        )
      );
    }
  }
  options;
  opts;
  events = new Emitter({
    state: /* @__PURE__ */ new Set(),
    transport: /* @__PURE__ */ new Set(),
    error: /* @__PURE__ */ new Set(),
    lost: /* @__PURE__ */ new Set(),
    serverSubscribe: /* @__PURE__ */ new Set(),
    serverUnsubscribe: /* @__PURE__ */ new Set(),
    serverMessage: /* @__PURE__ */ new Set()
  });
  tokens;
  subs;
  server;
  link;
  /** The connection's state. */
  get state() {
    return this.link.state;
  }
  /** The transport in use now (the last one that opened), if any. */
  get transport() {
    return this.link.transport;
  }
  /** A topic's cursor: the id of the last message delivered, or its starting position (a
   *  topic a pattern delivered included). */
  cursor(topic) {
    return this.subs.cursor(topic);
  }
  /** Every cursor the client holds, `{ topic: "<epoch>-<seq>" }`: the topics subscribed by
   *  name, those the application subscribed the connection to, those the patterns delivered
   *  (the most recent `MAX_PATTERN_TOPICS`). Kept by an application, it is `options.cursors`
   *  of a later client that resumes where this one stopped. */
  cursors() {
    return this.subs.all();
  }
  /** A page of a topic's history (`GET /v1/topics/{topic}/history` on the gateway, with the
   *  token): the newest `limit` messages (1..1000, default 100), or those after `since`,
   *  oldest first. The token must allow the topic (or the topic is public). */
  async history(topic, options = {}) {
    if (!isTopicName(topic)) throw new TypeError(`Herald: bad topic name ${JSON.stringify(topic)}`);
    if (options.limit !== void 0 && !(Number.isInteger(options.limit) && options.limit >= 1 && options.limit <= 1e3)) {
      throw new RangeError(`Herald: history limit must be a whole number from 1 to 1000, not ${String(options.limit)}`);
    }
    if (this.tokens.missing) await this.tokens.refresh();
    return historyOverHttp(this.link.url, topic, options, this.tokens.current, this.fetch(), this.opts.credentials);
  }
  /** The topics whose messages go to `serverMessage` listeners: those the application
   *  subscribed the connection to (and the kept personal topic), less those the client
   *  subscribed itself. */
  get serverTopics() {
    return this.server.list(this.link.current);
  }
  /** Listens to `state`, `transport`, `error` (a refusal, a failed attempt), `lost` (loss
   *  signals of subscriptions without `onLost`), `serverSubscribe` / `serverUnsubscribe`
   *  (the application subscribed the connection to topics, or they ended) and
   *  `serverMessage` (messages of those topics). Listening to `serverMessage` opens a
   *  WebSocket even without a subscription. Returns a function that stops listening. */
  on(event, fn) {
    this.events.on(event, fn);
    if (event === "serverMessage") this.link.topicsChanged();
    return () => this.off(event, fn);
  }
  off(event, fn) {
    this.events.off(event, fn);
  }
  /** Subscribes `onMessage` to `topic`, or to every topic a prefix pattern such as
   *  `orders.*` matches. Many subscriptions share one connection. */
  subscribe(topic, onMessage, options = {}) {
    if (this.link.closed) throw new Error("Herald: subscribe after close()");
    const pattern = isPattern(topic);
    const bad = subscriptionError(topic);
    if (bad !== void 0) {
      throw new TypeError(`Herald: bad ${pattern ? "pattern" : "topic name"} ${JSON.stringify(topic)}: ${bad}`);
    }
    if (options.last !== void 0 && !(Number.isInteger(options.last) && options.last >= 0)) {
      throw new RangeError(`Herald: last must be a whole number, not ${String(options.last)}`);
    }
    if (options.last !== void 0 && pattern) {
      throw new TypeError(`Herald: last does not apply to a pattern (${JSON.stringify(topic)}): it starts its topics live`);
    }
    if (options.delta !== void 0 && options.delta !== "fossil") {
      throw new TypeError(`Herald: unknown delta ${JSON.stringify(options.delta)} (only "fossil")`);
    }
    const sub = {
      topic,
      onMessage,
      onLost: options.onLost,
      last: options.last,
      delta: options.delta === "fossil",
      active: true
    };
    if (this.subs.add(sub, this.opts.maxTopics)) this.link.topicsChanged();
    return {
      topic,
      unsubscribe: () => {
        if (this.subs.remove(sub)) this.link.topicsChanged();
      }
    };
  }
  /** Publishes: over the WebSocket when it is open (the token's `publish` claim must allow
   *  the topic), else with `POST /v1/publish` on the gateway (a token or `apiKey`). */
  async publish(topic, data, options = {}) {
    if (!isTopicName(topic)) throw new TypeError(`Herald: bad topic name ${JSON.stringify(topic)}`);
    if (this.tokens.missing) await this.tokens.refresh();
    const conn = this.link.current;
    if (conn?.publish && this.link.state === "open") return conn.publish(topic, data, options.event);
    return publishOverHttp(
      this.link.url,
      { topic, data, event: options.event },
      { token: this.tokens.current, apiKey: this.options.apiKey },
      this.fetch(),
      this.opts.credentials
    );
  }
  /** Counters: `deltas`, the deltas applied; `deltaFailures`, those that could not be (each
   *  also an `error` event), whose topics were subscribed again from their cursors;
   *  `batches`, the WebSocket batch frames received (`options.batch`). */
  stats() {
    return { ...this.link.stats };
  }
  /** Closes the connection for good. */
  close() {
    this.link.close();
  }
  /** A connection of `transport` to `url`: a built-in transport, or `options.connect`'s. */
  open(transport, url, handlers) {
    const ctx = {
      url,
      topics: () => this.subs.resume(this.server.wanted()),
      patternCursors: () => this.subs.patternCursors(this.server.wanted()),
      last: (topic) => this.subs.last(topic),
      delta: (topic) => this.subs.delta(topic),
      token: () => this.tokens.current,
      fetch: this.fetch(),
      // A constructor like the WHATWG one (Node's `ws`) is used as one.
      WebSocket: this.options.WebSocket ?? globalThis.WebSocket,
      format: this.opts.format,
      batch: this.opts.batch,
      perMessageDeflate: this.opts.perMessageDeflate,
      deadTimeout: this.opts.deadTimeout,
      credentials: this.opts.credentials,
      openTimeout: this.opts.openTimeout,
      pollTimeout: this.opts.pollTimeout
    };
    if (this.options.connect) return this.options.connect(transport, ctx, handlers);
    return openConnection(transport, ctx, handlers);
  }
  fetch() {
    return this.options.fetch ?? globalThis.fetch.bind(globalThis);
  }
};
var herald_default = Herald;
export {
  DeltaError,
  Herald,
  HeraldError,
  MAX_DELTA_TARGET,
  MAX_PATTERN_TOPICS,
  MsgpackError,
  ProtocolError,
  SseParser,
  applyFossil,
  decode as decodeMsgpack,
  herald_default as default,
  encode as encodeMsgpack,
  formatResumeList,
  fullJitter,
  isAfter,
  isPattern,
  isTopicName,
  matchesPattern,
  parseCursor,
  parseResumeList,
  personalTopic,
  subscriptionError,
  tokenExpiry
};
