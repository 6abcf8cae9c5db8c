#!/usr/bin/env python3
"""The hook backend of deploy/hostile-soak.sh: a tiny HTTP server (standard library only) that
Herald's connect and subscribe hooks call during the hostile soak.

- POST /connect: allows every client.
- POST /subscribe: answers 503 for a `secret:` topic (the hook is unavailable there, so
  `hooks.on_unavailable = "allow"` is what decides), denies `rooms:secret`, allows the rest
  (every other `rooms:` topic, and the topics of namespaces the hook is asked about by
  default).

It listens on a free loopback port and writes that port to the file named by its only
argument once it is listening. Keep-alive (HTTP/1.1), since Herald pools its hook
connections; one thread per connection.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024


class Hooks(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the standard library's name)
        length = int(self.headers.get("content-length") or 0)
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
