// MessagePack (https://github.com/msgpack/msgpack/blob/master/spec.md), as much of it as the
// gateway's `herald.msgpack` WebSocket subprotocol uses (docs/protocol.md, "MessagePack"):
// nil, booleans, integers, floats, strings, binary, arrays and maps with string keys. No
// extension types: the gateway refuses payloads that hold one, so a frame with one is
// malformed.
//
// Decoding maps a value to what `JSON.parse` would give for its JSON form, except: `bin` is a
// `Uint8Array`, and an integer beyond ±2^53 a `bigint`. Encoding follows `JSON.stringify`
// (`toJSON`, properties that are `undefined` or functions left out, non-finite numbers as
// nil), plus `Uint8Array`/`ArrayBuffer` as `bin` and `bigint` as a 64-bit integer.

/** A value is not MessagePack, or not one the client reads. */
export class MsgpackError extends Error {
  override name = "MsgpackError";
}

/** Deepest nesting of arrays and maps decoded (the gateway allows 64 in a payload, plus the
 *  frame around it). */
export const MAX_DEPTH = 100;

const utf8Decoder = new TextDecoder("utf-8", { fatal: true });
const utf8Encoder = new TextEncoder();

/** Decodes one MessagePack value filling `bytes` exactly. Throws `MsgpackError`. */
export function decode(bytes: Uint8Array): unknown {
  const d = new Decoder(bytes);
  const v = d.value(0);
  if (d.pos !== bytes.length) throw new MsgpackError(`${bytes.length - d.pos} bytes after the value`);
  return v;
}

class Decoder {
  pos = 0;
  private readonly view: DataView;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number): number {
    const at = this.pos;
    if (at + n > this.bytes.length) throw new MsgpackError("truncated value");
    this.pos = at + n;
    return at;
  }

  private u8(): number {
    return this.view.getUint8(this.need(1));
  }

  private u16(): number {
    return this.view.getUint16(this.need(2));
  }

  private u32(): number {
    return this.view.getUint32(this.need(4));
  }

  private big(v: bigint): number | bigint {
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }

  value(depth: number): unknown {
    const b = this.u8();
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0x80 && b <= 0x8f) return this.map(b & 0x0f, depth);
    if (b >= 0x90 && b <= 0x9f) return this.array(b & 0x0f, depth);
    if (b >= 0xa0 && b <= 0xbf) return this.str(b & 0x1f);
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return this.bin(this.u8());
      case 0xc5:
        return this.bin(this.u16());
      case 0xc6:
        return this.bin(this.u32());
      case 0xca:
        return this.view.getFloat32(this.need(4));
      case 0xcb:
        return this.view.getFloat64(this.need(8));
      case 0xcc:
        return this.u8();
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf:
        return this.big(this.view.getBigUint64(this.need(8)));
      case 0xd0:
        return this.view.getInt8(this.need(1));
      case 0xd1:
        return this.view.getInt16(this.need(2));
      case 0xd2:
        return this.view.getInt32(this.need(4));
      case 0xd3:
        return this.big(this.view.getBigInt64(this.need(8)));
      case 0xd9:
        return this.str(this.u8());
      case 0xda:
        return this.str(this.u16());
      case 0xdb:
        return this.str(this.u32());
      case 0xdc:
        return this.array(this.u16(), depth);
      case 0xdd:
        return this.array(this.u32(), depth);
      case 0xde:
        return this.map(this.u16(), depth);
      case 0xdf:
        return this.map(this.u32(), depth);
      case 0xc7:
      case 0xc8:
      case 0xc9:
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        throw new MsgpackError(`extension type 0x${b.toString(16)}: not read by this client`);
      default:
        throw new MsgpackError(`0x${b.toString(16)} is not a MessagePack type`);
    }
  }

  private str(n: number): string {
    const at = this.need(n);
    try {
      return utf8Decoder.decode(this.bytes.subarray(at, at + n));
    } catch {
      throw new MsgpackError("a string that is not UTF-8");
    }
  }

  private bin(n: number): Uint8Array {
    const at = this.need(n);
    return this.bytes.slice(at, at + n);
  }

  private array(n: number, depth: number): unknown[] {
    if (depth >= MAX_DEPTH) throw new MsgpackError(`nested deeper than ${MAX_DEPTH}`);
    // Each element takes a byte at least: a count past the bytes left is a lie (no allocation).
    if (n > this.bytes.length - this.pos) throw new MsgpackError("truncated array");
    const out = new Array<unknown>(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }

  private map(n: number, depth: number): Record<string, unknown> {
    if (depth >= MAX_DEPTH) throw new MsgpackError(`nested deeper than ${MAX_DEPTH}`);
    if (2 * n > this.bytes.length - this.pos) throw new MsgpackError("truncated map");
    const out: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) {
      const k = this.value(depth + 1);
      if (typeof k !== "string") throw new MsgpackError("a map key that is not a string");
      const v = this.value(depth + 1);
      // As JSON.parse does: an own property, even "__proto__".
      if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
      else out[k] = v;
    }
    return out;
  }
}

/** Encodes a value (as `JSON.stringify` would see it) as MessagePack. Throws a `TypeError`
 *  for a cycle, a `bigint` out of 64 bits, or nesting past 512. */
export function encode(value: unknown): Uint8Array {
  const e = new Encoder();
  e.value(value, 0);
  return e.result();
}

class Encoder {
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  private pos = 0;

  result(): Uint8Array {
    return this.buf.slice(0, this.pos);
  }

  private room(n: number): number {
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
  private byte(b: number): void {
    const at = this.room(1);
    this.buf[at] = b;
  }

  private head(n: number, fix: number | undefined, fixMax: number, c8: number | undefined, c16: number, c32: number): void {
    if (fix !== undefined && n <= fixMax) this.byte(fix | n);
    else if (c8 !== undefined && n <= 0xff) {
      this.byte(c8);
      this.byte(n);
    } else if (n <= 0xffff) {
      this.tagged(c16, 2, (v, at) => v.setUint16(at, n));
    } else {
      this.tagged(c32, 4, (v, at) => v.setUint32(at, n));
    }
  }

  /** A tag byte, then `size` bytes that `write` writes (into the view of after `room`). */
  private tagged(tag: number, size: number, write: (view: DataView, at: number) => void): void {
    this.byte(tag);
    const at = this.room(size);
    write(this.view, at);
  }

  private bytes(b: Uint8Array): void {
    const at = this.room(b.length);
    this.buf.set(b, at);
  }

  value(v: unknown, depth: number): void {
    if (depth > 512) throw new TypeError("MessagePack: a cyclic or too deeply nested value");
    if (v !== null && typeof v === "object" && typeof (v as { toJSON?: unknown }).toJSON === "function") {
      v = (v as { toJSON: () => unknown }).toJSON();
    }
    switch (typeof v) {
      case "boolean":
        this.byte(v ? 0xc3 : 0xc2);
        return;
      case "number":
        this.number(v);
        return;
      case "bigint":
        this.bigint(v);
        return;
      case "string": {
        const b = utf8Encoder.encode(v);
        this.head(b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
        this.bytes(b);
        return;
      }
      case "object":
        if (v === null) break;
        if (v instanceof Uint8Array || v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
          const b =
            v instanceof Uint8Array
              ? v
              : v instanceof ArrayBuffer
                ? new Uint8Array(v)
                : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
          this.head(b.length, undefined, 0, 0xc4, 0xc5, 0xc6);
          this.bytes(b);
          return;
        }
        if (Array.isArray(v)) {
          this.head(v.length, 0x90, 15, undefined, 0xdc, 0xdd);
          for (const x of v) this.value(x, depth + 1);
          return;
        }
        this.object(v as Record<string, unknown>, depth);
        return;
      default:
        break;
    }
    this.byte(0xc0); // null, undefined, functions, symbols: nil (JSON's null)
  }

  private object(o: Record<string, unknown>, depth: number): void {
    const entries = Object.keys(o)
      .map((k) => [k, o[k]] as const)
      .filter(([, x]) => x !== undefined && typeof x !== "function" && typeof x !== "symbol");
    this.head(entries.length, 0x80, 15, undefined, 0xde, 0xdf);
    for (const [k, x] of entries) {
      this.value(k, depth + 1);
      this.value(x, depth + 1);
    }
  }

  private number(n: number): void {
    if (!Number.isFinite(n)) {
      this.byte(0xc0); // as JSON.stringify: null
      return;
    }
    if (!Number.isSafeInteger(n)) {
      this.tagged(0xcb, 8, (v, at) => v.setFloat64(at, n));
      return;
    }
    if (n >= 0) {
      if (n <= 0x7f) this.byte(n);
      else if (n <= 0xff) {
        this.byte(0xcc);
        this.byte(n);
      } else if (n <= 0xffff) {
        this.tagged(0xcd, 2, (v, at) => v.setUint16(at, n));
      } else if (n <= 0xffffffff) {
        this.tagged(0xce, 4, (v, at) => v.setUint32(at, n));
      } else {
        this.tagged(0xcf, 8, (v, at) => v.setBigUint64(at, BigInt(n)));
      }
    } else if (n >= -32) {
      this.byte(n & 0xff);
    } else if (n >= -0x80) {
      this.tagged(0xd0, 1, (v, at) => v.setInt8(at, n));
    } else if (n >= -0x8000) {
      this.tagged(0xd1, 2, (v, at) => v.setInt16(at, n));
    } else if (n >= -0x80000000) {
      this.tagged(0xd2, 4, (v, at) => v.setInt32(at, n));
    } else {
      this.tagged(0xd3, 8, (v, at) => v.setBigInt64(at, BigInt(n)));
    }
  }

  private bigint(n: bigint): void {
    if (n >= 0n && n < 1n << 64n) {
      if (n <= BigInt(Number.MAX_SAFE_INTEGER)) return this.number(Number(n));
      this.tagged(0xcf, 8, (v, at) => v.setBigUint64(at, n));
    } else if (n < 0n && n >= -(1n << 63n)) {
      if (n >= BigInt(Number.MIN_SAFE_INTEGER)) return this.number(Number(n));
      this.tagged(0xd3, 8, (v, at) => v.setBigInt64(at, n));
    } else {
      throw new TypeError("MessagePack: a bigint out of 64 bits");
    }
  }
}
