// Cursors and resume lists, as docs/protocol.md defines them.
//
// A cursor is `<epoch>-<seq>`: the epoch in lower-case hex, the sequence number in decimal.
// Sequence numbers grow within an epoch; `<epoch>-0` means "before everything". A resume list
// names one cursor per topic: `topic=cursor,topic=cursor` (SSE ids, long-poll cursors).

/** A parsed cursor. `seq` is kept as text: it may exceed 2^53. */
export interface Cursor {
  epoch: string;
  seq: string;
}

const CURSOR = /^([0-9a-f]{1,16})-([0-9]{1,20})$/;
const TOPIC = /^[A-Za-z0-9_.:@-]{1,128}$/;

/** Whether `name` is a valid topic name (1–128 of `A–Z a–z 0–9 _ . : @ -`). */
export function isTopicName(name: string): boolean {
  return TOPIC.test(name);
}

/** Parses `<epoch>-<seq>`; `undefined` when it is not a cursor. */
export function parseCursor(text: string): Cursor | undefined {
  const m = CURSOR.exec(text);
  if (!m) return undefined;
  // Leading zeros would make text comparison lie; normalise them away.
  return { epoch: m[1]!.replace(/^0+(?=.)/, ""), seq: m[2]!.replace(/^0+(?=.)/, "") };
}

/** Compares two decimal sequence numbers given as text (no leading zeros). */
export function compareSeq(a: string, b: string): number {
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Whether a message at `id` is new for a subscriber whose cursor is `cursor`: always when
 * there is no cursor or the epochs differ (the gateway signals the loss), else only when its
 * sequence number is higher. Ids that do not parse are delivered (never silently dropped).
 */
export function isAfter(id: string, cursor: string | undefined): boolean {
  if (cursor === undefined) return true;
  const a = parseCursor(id);
  const b = parseCursor(cursor);
  if (!a || !b || a.epoch !== b.epoch) return true;
  return compareSeq(a.seq, b.seq) > 0;
}

/** Parses a resume list `topic=cursor,...` into a map; malformed entries are skipped. */
export function parseResumeList(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const entry of text.split(",")) {
    const eq = entry.indexOf("=");
    if (eq <= 0) continue;
    const topic = entry.slice(0, eq).trim();
    const cursor = entry.slice(eq + 1).trim();
    if (isTopicName(topic) && parseCursor(cursor)) out.set(topic, cursor);
  }
  return out;
}

/** Writes a resume list for the topics that have a cursor. */
export function formatResumeList(cursors: Iterable<[string, string | undefined]>): string {
  const parts: string[] = [];
  for (const [topic, cursor] of cursors) {
    if (cursor !== undefined) parts.push(`${topic}=${cursor}`);
  }
  return parts.join(",");
}
