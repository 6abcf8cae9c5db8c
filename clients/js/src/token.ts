// Tokens: the JWT claims the client reads (without verifying them: the gateway does), and the
// current token, fetched from `options.token` and refreshed before it expires.

import type { TokenSource } from "./options.js";
import { asError } from "./types.js";
import { isTopicName } from "./cursor.js";

/** A JWT's claims, read without verifying it (the gateway does). */
function claims(token: string): Record<string, unknown> | undefined {
  const part = token.split(".")[1];
  if (!part) return undefined;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const c = JSON.parse(atob(b64)) as unknown;
    return typeof c === "object" && c !== null ? (c as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Seconds of a JWT's `exp` claim, if it has one. */
export function tokenExpiry(token: string): number | undefined {
  const exp = claims(token)?.exp;
  return typeof exp === "number" ? exp : undefined;
}

/** The personal topic `user:<sub>` of a JWT's `sub` claim, if it has one. */
export function personalTopic(token: string): string | undefined {
  const sub = claims(token)?.sub;
  if (typeof sub !== "string") return undefined;
  const topic = `user:${sub}`;
  return isTopicName(topic) ? topic : undefined;
}

/** The current token of `options.token`: a string as it is; a function called for the first
 *  token, again `margin` ms before each one expires, and once more when the gateway refuses
 *  one. */
export class TokenKeeper {
  /** The current token, if any. */
  current: string | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pending: Promise<void> | undefined;
  /** A refused token was replaced once already (reset when a connection opens). */
  private retried = false;

  constructor(
    private readonly source: TokenSource | undefined,
    /** Refresh this many ms before a token expires. */
    private readonly margin: number,
    /** A token refreshed before it expired: for the connection. */
    private readonly refreshed: (token: string) => void,
    /** A refresh before expiry failed. */
    private readonly failed: (e: Error) => void,
  ) {
    if (typeof source === "string") this.set(source);
  }

  /** A token is wanted and not fetched yet (a connection waits for `refresh()`). */
  get missing(): boolean {
    return this.source !== undefined && this.current === undefined;
  }

  private set(token: string): void {
    this.current = token;
    clearTimeout(this.timer);
    const exp = tokenExpiry(token);
    if (exp === undefined || typeof this.source !== "function") return;
    const wait = Math.max(0, exp * 1000 - Date.now() - this.margin);
    this.timer = setTimeout(() => {
      this.refresh()
        .then(() => {
          if (this.current) {
            this.refreshed(this.current);
          }
        })
        .catch((e: unknown) => this.failed(asError(e)));
    }, Math.min(wait, 2 ** 31 - 1));
  }

  /** Fetches a fresh token (one call of the function at a time). */
  refresh(): Promise<void> {
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
        this.pending = undefined;
      }
    })();
    return this.pending;
  }

  /** The token expired: the next connection fetches another first. */
  expired(): void {
    this.current = undefined;
  }

  /** The gateway refused the token: whether to try once more with a fresh one (a token
   *  function, not tried yet since a connection last opened). */
  retryRefused(): boolean {
    if (typeof this.source !== "function" || this.retried) return false;
    this.retried = true;
    this.current = undefined;
    return true;
  }

  /** A connection opened with the token. */
  accepted(): void {
    this.retried = false;
  }

  /** Stops refreshing (`close()`). */
  stop(): void {
    clearTimeout(this.timer);
  }
}
