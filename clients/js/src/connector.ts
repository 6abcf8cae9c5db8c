// The connection's life: one connection at a time (made when there is something to connect
// for), reconnected after a failure with backoff on the next URL and transport (backoff.ts),
// and, while on a fallback, a probe of the preferred transports that takes over once it opens.

import type { CloseInfo, Connection, ConnectionHandlers, State, TransportName } from "./types.js";
import { asError } from "./types.js";
import type { HeraldEvents } from "./options.js";
import type { Emitter } from "./events.js";
import type { Reconnects } from "./backoff.js";
import type { Subscriptions } from "./subscriptions.js";
import type { ServerSubscriptions } from "./server.js";
import type { TokenKeeper } from "./token.js";
import { DeltaError } from "./delta.js";

/** What the connector works with. */
export interface ConnectorParts {
  /** The gateway's URLs. */
  urls: string[];
  /** The transports to use, the preferred first. */
  transports: TransportName[];
  /** Try the preferred transport again this often while on a fallback, in ms. */
  upgradeInterval: number;
  /** A connection open this long counts as a success, in ms. */
  stableAfter: number;
  retry: Reconnects;
  subs: Subscriptions;
  server: ServerSubscriptions;
  tokens: TokenKeeper;
  events: Emitter<HeraldEvents>;
  /** Makes a connection of a transport to a URL. */
  open(transport: TransportName, url: string, handlers: ConnectionHandlers): Connection;
}

export class Connector {
  private _state: State = "connecting";
  private _transport: TransportName | undefined;
  private _closed = false;
  private conn: Connection | undefined;
  /** The transport (index) of `conn`. */
  private connTransport = 0;
  private connOpenedAt: number | undefined;
  private probe: Connection | undefined;
  private everOpen = false;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private probeTimer: ReturnType<typeof setTimeout> | undefined;
  private updateQueued = false;
  /** A connection attempt waits for its token. */
  private starting = false;
  /** Deltas applied, those that could not be, and WebSocket batch frames received. */
  readonly stats = { deltas: 0, deltaFailures: 0, batches: 0 };

  constructor(private readonly p: ConnectorParts) {}

  get state(): State {
    return this._state;
  }

  /** The transport in use now (the last one that opened), if any. */
  get transport(): TransportName | undefined {
    return this._transport;
  }

  get closed(): boolean {
    return this._closed;
  }

  /** The connection, open or opening, if any. */
  get current(): Connection | undefined {
    return this.conn;
  }

  /** The URL connected to, or to be connected to next. */
  get url(): string {
    return this.p.urls[this.p.retry.url]!;
  }

  /** The topics the client asks for changed (or something to connect for appeared): the
   *  connection updates, drops, or is made. */
  topicsChanged(): void {
    if (this._closed || this.updateQueued) return;
    this.updateQueued = true;
    // Batched: subscriptions made in one tick change the connection once.
    queueMicrotask(() => {
      this.updateQueued = false;
      if (this._closed) return;
      if (this.p.server.wanted().size === 0) {
        // SSE and poll need a topic; a WebSocket stays open for the next subscription.
        if (this.conn && this.conn.transport !== "websocket") this.drop();
        this.probe?.close();
        this.probe = undefined;
        if (this.conn) {
          this.conn.update();
          return;
        }
        // Nothing to subscribe: a WebSocket opens for `serverMessage` listeners, and any
        // transport once the token names the personal topic (`always`).
        if (this.p.events.count("serverMessage") === 0 && !this.p.server.personalPending()) return;
      }
      if (this.conn) {
        this.conn.update();
        this.probe?.update();
      } else if (this.retryTimer === undefined) {
        void this.connect();
      }
    });
  }

  /** Closes the connection for good. */
  close(): void {
    if (this._closed) return;
    this._closed = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.probeTimer);
    this.p.tokens.stop();
    this.probe?.close();
    this.probe = undefined;
    this.conn?.close();
    this.conn = undefined;
    this.p.server.clear();
    this.setState("closed");
  }

  private drop(): void {
    const old = this.conn;
    old?.close();
    this.conn = undefined;
    if (old) this.p.server.ended(old);
    clearTimeout(this.probeTimer);
    if (this._state !== "closed") this.setState("connecting");
  }

  private async connect(): Promise<void> {
    this.retryTimer = undefined;
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
      if (this._closed || this.conn || this.retryTimer !== undefined || !this.mayConnect(retry.transport)) return;
    }
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    const ti = retry.transport;
    const conn = this.spawn(ti, this.url);
    if (!conn) return;
    this.conn = conn;
    this.connTransport = ti;
    this.connOpenedAt = undefined;
  }

  /** A connection of transport `ti` whose reports count while it is the connection, or the
   *  probe (which becomes the connection when it opens). */
  private spawn(ti: number, url: string): Connection | undefined {
    const { subs, server } = this.p;
    const transport = this.p.transports[ti]!;
    let conn: Connection | undefined;
    const main = () => conn !== undefined && this.conn === conn;
    const probing = () => conn !== undefined && this.probe === conn;
    const handlers: ConnectionHandlers = {
      open: () => {
        if (probing()) this.promote(conn!, ti);
        else if (main()) this.onOpen(ti, transport);
      },
      message: (m) => {
        if (main() || probing()) subs.deliver(m, (topic) => server.carries(conn!, topic));
      },
      lost: (info, cursor) => {
        if (main() || probing()) subs.lost(info, cursor);
      },
      position: (topic, cursor) => {
        if (main() || probing()) subs.position(topic, cursor);
      },
      serverSubscribed: (topics) => {
        if (main() || probing()) server.subscribed(conn!, topics, main());
      },
      delta: (topic, error) => {
        if (!main() && !probing()) return;
        if (error === undefined) {
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
        if (main() || probing()) server.unsubscribed(conn!, topics, ended, main());
      },
      close: (info) => {
        if (main()) {
          this.conn = undefined;
          server.ended(conn!);
          this.onClose(info, ti);
        } else if (probing()) {
          this.probe = undefined;
          server.discard(conn!);
          // Still failing: try the next preferred one, or wait for the next round.
          if (ti + 1 < this.connTransport) this.startProbe(ti + 1);
          else this.scheduleProbe();
        }
      },
    };
    try {
      conn = this.p.open(transport, url, handlers);
      return conn;
    } catch (e) {
      if (this.probe === undefined && this.conn === undefined) {
        this.onClose({ reason: `${transport}: ${asError(e).message}` }, ti);
      }
      return undefined;
    }
  }

  /** The probe of a preferred transport opened: it becomes the connection. It subscribed
   *  with the cursors of the moment, and what the old connection delivered meanwhile is not
   *  delivered twice (cursors only move forward). */
  private promote(probe: Connection, ti: number): void {
    const old = this.conn;
    this.probe = undefined;
    this.conn = probe;
    old?.close();
    this.p.server.replaced(old, probe);
    this.p.retry.upgraded(ti);
    this.onOpen(ti, this.p.transports[ti]!);
  }

  private isWs(ti: number): boolean {
    return this.p.transports[ti] === "websocket";
  }

  /** Whether transport `ti` has something to connect for: a topic (the kept personal topic
   *  counts once the token is known); a WebSocket may open without any (the application
   *  may subscribe it). */
  private mayConnect(ti: number): boolean {
    return this.isWs(ti) || this.p.server.wanted().size > 0 || this.p.server.personalPending();
  }

  private onOpen(ti: number, transport: TransportName): void {
    this.connOpenedAt = Date.now();
    this.everOpen = true;
    this.p.tokens.accepted();
    this.connTransport = ti;
    // The transport first: a `state` listener reads the transport that opened.
    const changed = this._transport !== transport;
    this._transport = transport;
    this.setState("open");
    if (changed) this.p.events.emit("transport", transport);
    this.scheduleProbe();
  }

  private onClose(info: CloseInfo, ti: number): void {
    clearTimeout(this.probeTimer);
    this.probe?.close();
    this.probe = undefined;
    this.p.subs.clearHints();
    if (this._closed) return;
    const openedAt = this.connOpenedAt;
    this.connOpenedAt = undefined;
    if (info.fatal) {
      const invalidToken = info.fatal.code === "invalid_token" || info.fatal.status === 401;
      if (invalidToken && this.p.tokens.retryRefused()) {
        // One fresh token, then the same refusal is final.
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
    const stable = openedAt !== undefined && Date.now() - openedAt >= this.p.stableAfter;
    const delay = this.p.retry.closed(info, ti, stable);
    this.setState(this.everOpen ? "reconnecting" : "connecting");
    this.schedule(delay);
  }

  private schedule(delay: number): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.connect(), delay);
  }

  /** While on a fallback, tries the transports before it every `upgradeInterval`. */
  private scheduleProbe(): void {
    clearTimeout(this.probeTimer);
    if (this.connTransport === 0 || this._closed) return;
    this.probeTimer = setTimeout(() => this.startProbe(0), this.p.upgradeInterval);
  }

  private startProbe(pi: number): void {
    this.probeTimer = undefined;
    if (this._closed || !this.conn || this.probe || pi >= this.connTransport) return;
    if (this.p.server.wanted().size === 0 && !this.isWs(pi)) {
      this.scheduleProbe();
      return;
    }
    const probe = this.spawn(pi, this.url);
    if (probe) this.probe = probe;
    else this.scheduleProbe();
  }

  private setState(s: State): void {
    if (this._state === s) return;
    this._state = s;
    this.p.events.emit("state", s);
  }
}
