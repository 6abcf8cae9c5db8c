// Prefix patterns (`orders.*`), as docs/protocol.md ("Prefix patterns") defines them.
//
// A pattern is `<prefix>*` where the prefix is a valid topic name ending in a separator, `.`
// or `:`. It matches the topics that start with its prefix in the pattern's own namespace
// (the part of a name before its first `:`): `orders.*` matches `orders.eu` and
// `orders.eu.paris`, not `orders`, `ordersx.eu` or `orders.eu:x`. A bare `*` and patterns over
// the personal namespaces `user:` and `conn:` are refused, as the gateway refuses them.

import { isTopicName } from "./cursor.js";

/** Most topics whose positions the gateway keeps, per connection, for the topics its
 *  patterns delivered (all patterns together): the ones that delivered most recently. The
 *  client keeps as many cursors for them, no more. */
export const MAX_PATTERN_TOPICS = 32;

/** Namespaces no pattern may cover: the personal topics. */
const PERSONAL = ["user:", "conn:"];

/** Whether `name` is meant as a prefix pattern (it ends in `*`), valid or not. */
export function isPattern(name: string): boolean {
  return name.endsWith("*");
}

/** Why `name` cannot be subscribed to (as a topic, or as a pattern when it ends in `*`), or
 *  `undefined` when it can: the gateway's own rules and reasons. */
export function subscriptionError(name: string): string | undefined {
  if (!isPattern(name)) {
    if (name.includes("*")) return "`*` stands only last, after `.` or `:` (a pattern such as `orders.*`): anywhere else it is not a topic character";
    return isTopicName(name) ? undefined : "1-128 characters of A-Z a-z 0-9 _ . : @ -";
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
  return undefined;
}

/** Whether the pattern `pattern` (`orders.*`) matches the topic `topic`: the topic starts
 *  with the pattern's prefix and lies in the same namespace. */
export function matchesPattern(pattern: string, topic: string): boolean {
  if (!isPattern(pattern) || isPattern(topic)) return false;
  const prefix = pattern.slice(0, -1);
  return topic.startsWith(prefix) && (prefix.includes(":") || !topic.includes(":"));
}

/** Whether one of the patterns among `names` (topics and patterns) matches `topic`. */
export function matchedBy(names: Iterable<string>, topic: string): boolean {
  for (const n of names) if (matchesPattern(n, topic)) return true;
  return false;
}
