#!/usr/bin/env python3
"""The hook backend of deploy/hostile-soak.sh: a tiny HTTP server (standard library only) that
Herald's connect and subscribe hooks call during the hostile soak.

- POST /connect: allows every client.
- POST /subscribe: answers 503 for a `secret:` topic (the hook is unavailable there, so
  `hooks.on_unavailable = "allow"` is what decides), denies `rooms:secret`, allows the rest
  (every other `rooms:` topic, and the topics of namespaces the hook is asked about by
  default).

It is also the soak's OTLP/HTTP trace collector (Herald's `telemetry.otlp_endpoint`):

- POST /v1/traces: reads each span of the export (protobuf, decoded by hand: only the fields
  named below) and keeps what the trace-context attacks are checked against: the longest
  `tracestate` any span carries (characters and list members), and how many spans belong
  to the attacks' traces (trace ids beginning with `hstl`, the loadgen's TRACE_ID_PREFIX).
- GET /traces: those figures as JSON.

It listens on a free loopback port and writes that port to the file named by its only
argument once it is listening. Keep-alive (HTTP/1.1), since Herald pools its hook
connections; one thread per connection.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024
MAX_EXPORT = 64 * 1024 * 1024
# The first bytes of every trace id the loadgen's trace attacks send ("hstl").
ATTACK_TRACE = bytes.fromhex("6873746c")


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def fields(buf):
    """(field number, value) of a protobuf message; length-delimited values as bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            size, i = varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def spans(export):
    """The spans of an ExportTraceServiceRequest: resource_spans (1) > scope_spans (2) >
    spans (2)."""
    for n, resource_spans in fields(export):
        if n != 1:
            continue
        for m, scope_spans in fields(resource_spans):
            if m != 2:
                continue
            for k, span in fields(scope_spans):
                if k == 2:
                    yield span


class Traces:
    """What the collector saw."""

    def __init__(self):
        self.lock = threading.Lock()
        self.figures = {
            "exports": 0, "export_bytes_max": 0, "spans": 0, "attack_spans": 0,
            "tracestate_chars_max": 0, "tracestate_members_max": 0, "malformed": 0,
        }

    def add(self, export):
        with self.lock:
            f = self.figures
            f["exports"] += 1
            f["export_bytes_max"] = max(f["export_bytes_max"], len(export))
            try:
                for span in spans(export):
                    # Span: trace_id (1), trace_state (3)
                    trace_id, state = b"", b""
                    for n, value in fields(span):
                        if n == 1:
                            trace_id = value
                        elif n == 3:
                            state = value
                    f["spans"] += 1
                    f["attack_spans"] += trace_id.startswith(ATTACK_TRACE)
                    members = [m for m in state.split(b",") if m.strip()]
                    f["tracestate_chars_max"] = max(f["tracestate_chars_max"], len(state))
                    f["tracestate_members_max"] = max(f["tracestate_members_max"], len(members))
            except (ValueError, IndexError):
                f["malformed"] += 1


TRACES = Traces()


class Hooks(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the standard library's name)
        if self.path == "/traces":
            with TRACES.lock:
                self.answer(200, TRACES.figures)
        else:
            self.answer(404, {"error": "unknown"})

    def do_POST(self):  # noqa: N802 (the standard library's name)
        length = int(self.headers.get("content-length") or 0)
        if self.path == "/v1/traces" and length <= MAX_EXPORT:
            TRACES.add(self.rfile.read(length))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if length > MAX_BODY:
            self.answer(413, {"result": "deny", "reason": "too large"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.answer(400, {"result": "deny", "reason": "not JSON"})
            return
        if self.path == "/connect":
            self.answer(200, {"result": "allow"})
        elif self.path == "/subscribe":
            topics = request.get("topics") or []
            if any(t.startswith("secret:") for t in topics):
                self.answer(503, {"error": "the secret backend is down"})
            elif "rooms:secret" in topics:
                self.answer(200, {"result": "deny", "reason": "rooms:secret is private"})
            else:
                self.answer(200, {"result": "allow"})
        else:
            self.answer(404, {"result": "deny", "reason": "unknown hook"})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    server.daemon_threads = True
    with open(sys.argv[1], "w", encoding="ascii") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
