// Pieces of the gateway's JSON frames that more than one transport reads.

import type { HeraldMessage } from "./types.js";

/** The strings of an array (anything else: none). */
export function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

/** A message object of the JSON form (`{"type":"message","topic",..}`), or undefined. */
export function toMessage(f: unknown): HeraldMessage | undefined {
  if (typeof f !== "object" || f === null) return undefined;
  const o = f as Record<string, unknown>;
  if (o.type !== "message" || typeof o.topic !== "string" || typeof o.id !== "string") return undefined;
  const m: HeraldMessage = { topic: o.topic, id: o.id, data: o.data };
  if (typeof o.event === "string") m.event = o.event;
  return m;
}

/** The `topics` of a `{"topics": [..]}` event (`herald.subscribed`, `herald.unsubscribed`). */
export function topicsOf(data: string): string[] {
  try {
    return strings((JSON.parse(data) as { topics?: unknown }).topics);
  } catch {
    return [];
  }
}
