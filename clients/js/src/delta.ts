// Delta compression (docs/protocol.md, "Delta compression"): a subscription that asked for
// `delta: "fossil"` may receive a message whose `data` is a Fossil delta against the data of
// the topic's previous message on the connection. This file applies them: the Fossil decoder,
// the base bytes a delta applies to (read from the frame's raw text or MessagePack bytes), and
// `Bases`, the one base per topic a connection keeps.
//
// Why not the npm `fossil-delta` package: it reads past the end of a truncated insert
// (`undefined`s written as zero bytes, caught only by the weak checksum), its integers wrap
// at 32 bits (a huge claimed size reads as a small one), and it builds its output in a plain
// array. The decoder below is its algorithm (Fossil's delta.c), with every read
// bounds-checked, the claimed size bounded before anything is allocated, and the output
// written into one buffer of exactly that size. (`fossil-delta` is a dev dependency: the
// tests check this decoder against its encoder.)

import type { HeraldMessage } from "./types.js";

/** The largest result a delta may claim (64 MiB): past it the delta is refused unread. */
export const MAX_DELTA_TARGET = 64 * 1024 * 1024;

/** A delta that cannot be applied: malformed, too large, a bad checksum, or no base. */
export class DeltaError extends Error {
  /** For `error` listeners: always `bad_delta`. */
  readonly code = "bad_delta";
  override name = "DeltaError";
}

// Fossil's base-64 digits: 0-9 A-Z _ a-z ~.
const DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
const VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < DIGITS.length; i++) VALUE[DIGITS.charCodeAt(i)] = i;

/** Fossil's checksum: the sum of the bytes as big-endian 32-bit words, the tail padded. */
export function fossilChecksum(b: Uint8Array): number {
  let s0 = 0,
    s1 = 0,
    s2 = 0,
    s3 = 0;
  let i = 0;
  const n4 = b.length & ~3;
  for (; i < n4; i += 4) {
    s0 = (s0 + b[i]!) | 0;
    s1 = (s1 + b[i + 1]!) | 0;
    s2 = (s2 + b[i + 2]!) | 0;
    s3 = (s3 + b[i + 3]!) | 0;
  }
  let sum = (s3 + (s2 << 8) + (s1 << 16) + (s0 << 24)) | 0;
  const rest = b.length - n4;
  if (rest >= 3) sum = (sum + (b[i + 2]! << 8)) | 0;
  if (rest >= 2) sum = (sum + (b[i + 1]! << 16)) | 0;
  if (rest >= 1) sum = (sum + (b[i]! << 24)) | 0;
  return sum >>> 0;
}

/** Applies a Fossil delta to `base`. Throws `DeltaError` for anything malformed: a claimed
 *  size over `max`, a copy outside the base, an insert past the delta's end, a result not of
 *  the claimed size, a bad checksum, a missing terminator. Never reads or writes out of
 *  bounds, and runs in time linear in the delta and the result. */
export function applyFossil(base: Uint8Array, delta: Uint8Array, max = MAX_DELTA_TARGET): Uint8Array {
  let pos = 0;
  const int = (): number => {
    let v = 0;
    const start = pos;
    while (pos < delta.length) {
      const c = delta[pos]!;
      const d = c < 128 ? VALUE[c]! : -1;
      if (d < 0) break;
      v = v * 64 + d;
      if (v > 0xffffffff) throw new DeltaError("delta: a number past 32 bits");
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
        // '@': copy cnt bytes of the base from an offset, then ','
        const ofst = int();
        if (delta[pos++] !== 44) throw new DeltaError("delta: a copy not ended by ','");
        if (cnt > size - len) throw new DeltaError("delta: a copy past the claimed size");
        if (ofst + cnt > base.length) throw new DeltaError("delta: a copy past the end of the base");
        out.set(base.subarray(ofst, ofst + cnt), len);
        len += cnt;
        break;
      }
      case 58: {
        // ':': insert the cnt bytes that follow
        if (cnt > size - len) throw new DeltaError("delta: an insert past the claimed size");
        if (cnt > delta.length - pos) throw new DeltaError("delta: an insert past the end of the delta");
        out.set(delta.subarray(pos, pos + cnt), len);
        len += cnt;
        pos += cnt;
        break;
      }
      case 59: {
        // ';': the checksum of the result; the end
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

// ---- the base bytes of a frame ----

const DATA_KEY = '"data":';

/** A JSON message frame's `data` text, byte for byte: after the first `"data":` up to the
 *  frame's final `}` (Herald writes `data` last). */
export function jsonDataText(frame: string): string {
  const at = frame.indexOf(DATA_KEY);
  const end = frame.lastIndexOf("}");
  if (at < 0 || end < at + DATA_KEY.length) throw new DeltaError("a message frame without data");
  return frame.slice(at + DATA_KEY.length, end);
}

/** The end of the JSON value starting at `i` in `text` (whitespace before it skipped), for a
 *  document already known to be valid JSON. */
function skipJson(text: string, i: number): number {
  while (i < text.length && " \t\r\n".includes(text[i]!)) i++;
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
  while (i < text.length && !",}] \t\r\n".includes(text[i]!)) i++;
  return i;
}

function skipString(text: string, i: number): number {
  for (i++; i < text.length; i++) {
    const ch = text[i];
    if (ch === "\\") i++;
    else if (ch === '"') return i + 1;
  }
  throw new DeltaError("unterminated JSON string");
}

/** The raw text of each message of a poll answer (`{"messages":[{..},..],..}`), in order. */
export function pollMessageTexts(answer: string): string[] {
  let i = answer.indexOf("{") + 1;
  if (i === 0) throw new DeltaError("poll answer: not an object");
  for (;;) {
    while (i < answer.length && " \t\r\n,".includes(answer[i]!)) i++;
    if (answer[i] !== '"') throw new DeltaError("poll answer: no messages");
    const keyEnd = skipString(answer, i);
    const key = answer.slice(i, keyEnd);
    i = answer.indexOf(":", keyEnd) + 1;
    if (key !== '"messages"') {
      i = skipJson(answer, i);
      continue;
    }
    while (" \t\r\n".includes(answer[i]!)) i++;
    if (answer[i] !== "[") throw new DeltaError("poll answer: messages is not an array");
    i++;
    const out: string[] = [];
    for (;;) {
      while (i < answer.length && " \t\r\n,".includes(answer[i]!)) i++;
      if (i >= answer.length) throw new DeltaError("poll answer: unterminated messages");
      if (answer[i] === "]") return out;
      const end = skipJson(answer, i);
      out.push(answer.slice(i, end));
      i = end;
    }
  }
}

/** The raw text of each element of a WebSocket batch frame (a JSON array of frames, already
 *  known to be valid JSON), in order: an element's base is read from its own text. */
export function jsonArrayTexts(text: string): string[] {
  let i = 0;
  while (i < text.length && " \t\r\n".includes(text[i]!)) i++;
  if (text[i] !== "[") throw new DeltaError("batch: not an array");
  i++;
  const out: string[] = [];
  for (;;) {
    while (i < text.length && " \t\r\n,".includes(text[i]!)) i++;
    if (i >= text.length) throw new DeltaError("batch: unterminated array");
    if (text[i] === "]") return out;
    const end = skipJson(text, i);
    out.push(text.slice(i, end));
    i = end;
  }
}

/** The bytes of each element of a WebSocket batch frame (a MessagePack array of maps), in
 *  order, as views into `frame`. */
export function msgpackArrayItems(frame: Uint8Array): Uint8Array[] {
  const r = new MsgpackSkipper(frame);
  const n = r.arrayHeader();
  const out: Uint8Array[] = [];
  for (let k = 0; k < n; k++) {
    const start = r.pos;
    r.skip(0);
    out.push(frame.subarray(start, r.pos));
  }
  return out;
}

/** The bytes of the `data` value of a MessagePack message frame (a map), exactly as sent. */
export function msgpackDataBytes(frame: Uint8Array): Uint8Array {
  const r = new MsgpackSkipper(frame);
  const n = r.mapHeader();
  for (let k = 0; k < n; k++) {
    const keyStart = r.pos;
    r.skip(0);
    const key = frame.subarray(keyStart, r.pos);
    const start = r.pos;
    r.skip(0);
    // fixstr "data": 0xa4 'd' 'a' 't' 'a'
    if (key.length === 5 && key[0] === 0xa4 && key[1] === 100 && key[2] === 97 && key[3] === 116 && key[4] === 97) {
      return frame.subarray(start, r.pos);
    }
  }
  throw new DeltaError("a message frame without data");
}

class MsgpackSkipper {
  pos = 0;
  constructor(private readonly b: Uint8Array) {}

  private need(n: number): number {
    if (n > this.b.length - this.pos) throw new DeltaError("truncated MessagePack");
    const at = this.pos;
    this.pos += n;
    return at;
  }

  private uint(n: number): number {
    const at = this.need(n);
    let v = 0;
    for (let i = 0; i < n; i++) v = v * 256 + this.b[at + i]!;
    return v;
  }

  arrayHeader(): number {
    const c = this.b[this.need(1)]!;
    if (c >= 0x90 && c <= 0x9f) return c & 0x0f;
    if (c === 0xdc) return this.uint(2);
    if (c === 0xdd) return this.uint(4);
    throw new DeltaError("a MessagePack batch that is not an array");
  }

  mapHeader(): number {
    const c = this.b[this.need(1)]!;
    if (c >= 0x80 && c <= 0x8f) return c & 0x0f;
    if (c === 0xde) return this.uint(2);
    if (c === 0xdf) return this.uint(4);
    throw new DeltaError("a MessagePack frame that is not a map");
  }

  skip(depth: number): void {
    if (depth > 100) throw new DeltaError("MessagePack nested too deep");
    const c = this.b[this.need(1)]!;
    if (c <= 0x7f || c >= 0xe0 || c === 0xc0 || c === 0xc2 || c === 0xc3) return;
    if (c >= 0xa0 && c <= 0xbf) return void this.need(c & 0x1f);
    if (c >= 0x80 && c <= 0x8f) return this.items(2 * (c & 0x0f), depth);
    if (c >= 0x90 && c <= 0x9f) return this.items(c & 0x0f, depth);
    switch (c) {
      case 0xc4: case 0xd9: return void this.need(this.uint(1)); // prettier-ignore
      case 0xc5: case 0xda: return void this.need(this.uint(2)); // prettier-ignore
      case 0xc6: case 0xdb: return void this.need(this.uint(4)); // prettier-ignore
      case 0xc7: return void this.need(this.uint(1) + 1);
      case 0xc8: return void this.need(this.uint(2) + 1);
      case 0xc9: return void this.need(this.uint(4) + 1);
      case 0xca: return void this.need(4);
      case 0xcb: return void this.need(8);
      case 0xcc: case 0xd0: return void this.need(1); // prettier-ignore
      case 0xcd: case 0xd1: return void this.need(2); // prettier-ignore
      case 0xce: case 0xd2: return void this.need(4); // prettier-ignore
      case 0xcf: case 0xd3: return void this.need(8); // prettier-ignore
      case 0xd4: return void this.need(2);
      case 0xd5: return void this.need(3);
      case 0xd6: return void this.need(5);
      case 0xd7: return void this.need(9);
      case 0xd8: return void this.need(17);
      case 0xdc: return this.items(this.uint(2), depth);
      case 0xdd: return this.items(this.uint(4), depth);
      case 0xde: return this.items(2 * this.uint(2), depth);
      case 0xdf: return this.items(2 * this.uint(4), depth);
      default: throw new DeltaError(`MessagePack: bad byte 0x${c.toString(16)}`);
    }
  }

  private items(n: number, depth: number): void {
    for (let i = 0; i < n; i++) this.skip(depth + 1);
  }
}

// ---- the bases a connection keeps ----

/** Messages that came as a delta (`"delta": true`): their `data` is the delta (a string in
 *  JSON, a `Uint8Array` in MessagePack) until `Bases.apply` replaces it. */
export const deltaMessages = new WeakSet<HeraldMessage>();

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/** One base per topic (the data of its last message on this connection), for the topics that
 *  asked for deltas: at most one per subscribed topic, dropped with the topic. */
export class Bases {
  private readonly bases = new Map<string, string | Uint8Array>();

  constructor(
    /** Whether `topic` asked for deltas (only those keep a base). */
    private readonly wants: (topic: string) => boolean,
    /** Decodes a MessagePack data value (MessagePack connections). */
    private readonly decodeMsgpack?: (b: Uint8Array) => unknown,
  ) {}

  /** A message read from a JSON frame (`frame`: its raw text): a delta is applied (its data
   *  replaced by the full data); the base is kept. Throws `DeltaError`. */
  json(m: HeraldMessage, frame: () => string): boolean {
    const delta = deltaMessages.has(m);
    if (!delta) {
      if (this.wants(m.topic)) this.bases.set(m.topic, jsonDataText(frame()));
      else this.bases.delete(m.topic);
      return false;
    }
    const base = this.take(m.topic);
    if (typeof m.data !== "string") throw new DeltaError("delta: data is not a string");
    const out = applyFossil(typeof base === "string" ? utf8.encode(base) : base, utf8.encode(m.data));
    let text: string;
    try {
      text = utf8Strict.decode(out);
      m.data = JSON.parse(text) as unknown;
    } catch (e) {
      throw new DeltaError(`delta: the result is not JSON: ${(e as Error).message}`);
    }
    deltaMessages.delete(m);
    if (this.wants(m.topic)) this.bases.set(m.topic, text);
    return true;
  }

  /** A message read from a MessagePack frame (`frame`: its bytes, or a function giving them,
   *  called only when a base is kept). Throws `DeltaError`. */
  msgpack(m: HeraldMessage, frame: Uint8Array | (() => Uint8Array)): boolean {
    const delta = deltaMessages.has(m);
    if (!delta) {
      // A copy: the frame's buffer is not ours to keep a view of.
      if (this.wants(m.topic)) this.bases.set(m.topic, msgpackDataBytes(typeof frame === "function" ? frame() : frame).slice());
      else this.bases.delete(m.topic);
      return false;
    }
    const base = this.take(m.topic);
    if (!(m.data instanceof Uint8Array)) throw new DeltaError("delta: data is not bin");
    const out = applyFossil(typeof base === "string" ? utf8.encode(base) : base, m.data);
    try {
      m.data = this.decodeMsgpack!(out);
    } catch (e) {
      throw new DeltaError(`delta: the result is not MessagePack: ${(e as Error).message}`);
    }
    deltaMessages.delete(m);
    if (this.wants(m.topic)) this.bases.set(m.topic, out);
    return true;
  }

  /** The base of `topic`, dropped from the map (a failure leaves none). */
  private take(topic: string): string | Uint8Array {
    const base = this.bases.get(topic);
    this.bases.delete(topic);
    if (base === undefined) throw new DeltaError(`delta: no base held for ${topic}`);
    return base;
  }

  drop(topic: string): void {
    this.bases.delete(topic);
  }

  clear(): void {
    this.bases.clear();
  }

  get size(): number {
    return this.bases.size;
  }
}
