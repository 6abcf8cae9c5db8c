// An incremental parser of the text/event-stream format (the WHATWG HTML "server-sent events"
// interpretation), fed with decoded text chunks of any size.

/** One dispatched block. `event` is "message" when the block named none. */
export interface SseEvent {
  event: string;
  data: string;
  /** The `id:` field of this block, if it had one. */
  id?: string;
}

export interface SseHandlers {
  /** A block with data lines. */
  event(e: SseEvent): void;
  /** A block with an `id:` field but no data (Herald's opening block). */
  id?(id: string): void;
  /** A `retry:` field, in ms. */
  retry?(ms: number): void;
}

/** Thrown when a single line grows past the parser's bound. */
export class SseLineTooLong extends Error {}

export class SseParser {
  private buffer = "";
  private data: string[] = [];
  private size = 0;
  private event = "";
  private id: string | undefined;
  private sawCr = false;

  /** `maxLine`: the longest line accepted, in UTF-16 code units (bounds the buffer). */
  constructor(private readonly handlers: SseHandlers, private readonly maxLine = 1 << 22) {}

  push(chunk: string): void {
    let text = chunk;
    // A CR at the end of the last chunk already ended a line: a LF right after it belongs to it.
    if (this.sawCr && text.startsWith("\n")) text = text.slice(1);
    this.sawCr = false;
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 10 || c === 13) {
        this.line(this.buffer + text.slice(start, i));
        this.buffer = "";
        if (c === 13) {
          if (i + 1 < text.length) {
            if (text.charCodeAt(i + 1) === 10) i++;
          } else {
            this.sawCr = true;
          }
        }
        start = i + 1;
      }
    }
    this.buffer += text.slice(start);
    if (this.buffer.length > this.maxLine) {
      throw new SseLineTooLong(`an event-stream line is longer than ${this.maxLine} characters`);
    }
  }

  private line(line: string): void {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "data":
        this.size += value.length + 1;
        if (this.size > this.maxLine) {
          throw new SseLineTooLong(`an event is longer than ${this.maxLine} characters`);
        }
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.handlers.retry?.(Number(value));
        break;
      default:
        break;
    }
  }

  private dispatch(): void {
    const id = this.id;
    const data = this.data;
    const event = this.event;
    this.id = undefined;
    this.data = [];
    this.size = 0;
    this.event = "";
    if (data.length === 0) {
      if (id !== undefined) this.handlers.id?.(id);
      return;
    }
    const e: SseEvent = { event: event || "message", data: data.join("\n") };
    if (id !== undefined) e.id = id;
    this.handlers.event(e);
  }
}
