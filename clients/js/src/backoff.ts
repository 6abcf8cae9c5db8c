// Reconnect delays: exponential backoff with full jitter (a random delay between zero and the
// exponential bound), so that the clients of a drained node do not come back all at once; and
// which gateway URL and transport the next attempt uses.

import type { CloseInfo } from "./types.js";

export interface BackoffOptions {
  /** Bound of the first retry, in ms (default 500). */
  base?: number;
  /** Largest bound, in ms (default 30000). */
  max?: number;
}

/** A delay in [0, min(max, base · 2^attempt)] ms. `random` returns a number in [0, 1). */
export function fullJitter(
  attempt: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const base = options.base ?? 500;
  const max = options.max ?? 30000;
  const bound = Math.min(max, base * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.floor(random() * bound);
}

/** Where and when to reconnect. An attempt that fails (cannot connect, or is cut off before
 *  it was stable) moves on to the next URL, and once every URL failed on a transport, to the
 *  next transport; the delays grow with the failures in a row. */
export class Reconnects {
  /** Index of the transport the next attempt uses. */
  transport = 0;
  /** Index of the URL the next attempt uses. */
  url = 0;
  /** Attempts failed on this transport since it was chosen (one per URL before moving on). */
  private failsHere = 0;
  /** Attempts failed in a row: the backoff's exponent. */
  private failures = 0;

  constructor(
    private readonly urls: number,
    private readonly transports: number,
    private readonly backoff: BackoffOptions,
    private readonly random: () => number,
  ) {}

  /** The delay after an attempt that failed before connecting (no token). */
  failed(): number {
    return fullJitter(this.failures++, this.backoff, this.random);
  }

  /** Transport `ti`, preferred to the one in use, opened and took over. */
  upgraded(ti: number): void {
    this.transport = ti;
    this.failsHere = 0;
  }

  /** The delay after a connection of transport `ti` ended, not refused: `stable` when it
   *  had been open for long enough to count as a success. */
  closed(info: CloseInfo, ti: number, stable: boolean): number {
    if (info.shutdown) {
      // The node drains: come back after its hint (already spread per client) or a jittered
      // pause, on the same transport; not a failure of the transport.
      return info.retryMs ?? fullJitter(3, this.backoff, this.random);
    }
    if (stable) {
      this.failures = 0;
      this.failsHere = 0;
      return info.retryMs ?? fullJitter(0, this.backoff, this.random);
    }
    // Could not connect, or cut off at once: next URL, and after every URL failed on this
    // transport, the next transport.
    this.url = (this.url + 1) % this.urls;
    this.failsHere++;
    if (this.failsHere >= this.urls && ti === this.transport) {
      this.failsHere = 0;
      this.transport = (this.transport + 1) % this.transports;
    }
    return Math.max(info.retryMs ?? 0, fullJitter(this.failures++, this.backoff, this.random));
  }
}
