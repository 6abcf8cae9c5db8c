// Reconnect delays: exponential backoff with full jitter (a random delay between zero and the
// exponential bound), so that the clients of a drained node do not come back all at once.

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
