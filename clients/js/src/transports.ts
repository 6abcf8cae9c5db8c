// The transports (websocket.ts, sse.ts, poll.ts), each a `Connection` (types.ts): the client
// makes them here and knows nothing else of them.

import type { Connection, ConnectionContext, ConnectionHandlers, TransportName } from "./types.js";
import { WsConnection } from "./websocket.js";
import { SseConnection } from "./sse.js";
import { PollConnection } from "./poll.js";

/** The transports, in the order a client tries them by default. */
export const TRANSPORTS: readonly TransportName[] = ["websocket", "sse", "poll"];

/** A connection of `transport`; it starts at once and reports to `handlers`. */
export function openConnection(transport: TransportName, ctx: ConnectionContext, handlers: ConnectionHandlers): Connection {
  switch (transport) {
    case "websocket":
      return new WsConnection(ctx, handlers);
    case "sse":
      return new SseConnection(ctx, handlers);
    case "poll":
      return new PollConnection(ctx, handlers);
  }
}
