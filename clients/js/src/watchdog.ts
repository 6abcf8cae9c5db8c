// The dead-connection timeout: a connection that receives nothing (messages, replies,
// heartbeats) for `timeout` ms is given up, as a TCP connection whose peer went silent may
// stay "open" for many minutes. Halfway through the silence `idle` is called once, so that a
// transport can ask for a sign of life (the WebSocket sends a `ping`: a browser never shows
// the gateway's own WebSocket pings to a page).

export class Watchdog {
  private last = Date.now();
  private pinged = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;

  /** `timeout` 0 (or less): never. */
  constructor(
    private readonly timeout: number,
    private readonly dead: (silentMs: number) => void,
    private readonly idle?: () => void,
  ) {
    if (timeout > 0) this.arm(timeout / 2);
    else this.stopped = true;
  }

  /** Something arrived. Cheap: called for every chunk and frame. */
  feed(): void {
    this.last = Date.now();
    this.pinged = false;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.check(), Math.max(1, ms));
  }

  private check(): void {
    this.timer = undefined;
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
}
