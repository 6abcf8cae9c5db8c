#!/usr/bin/env python3
"""RSS a few slow long-poll readers make the server hold. Fills big0..big3 with 256 messages
of ~60 KB each (admin publish), then opens SLOW connections that each send
GET /v1/poll?topic=big0&...&topic=big3&last=256&timeout=0 and read nothing; the server's
VmRSS before and WAIT seconds after. Then one reader that reads the answer: its size.
Usage: bench-poll-rss.py PID PUBLIC_PORT ADMIN_PORT [SLOW] [WAIT]"""
import http.client, json, socket, sys, time

pid, port, admin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
slow = int(sys.argv[4]) if len(sys.argv) > 4 else 6
wait = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0

def rss_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

c = http.client.HTTPConnection("127.0.0.1", admin)
pad = "x" * 60000
for i in range(256):
    for t in range(4):
        c.request("POST", "/v1/publish", json.dumps({"topic": f"big{t}", "data": {"i": i, "pad": pad}}),
                  {"content-type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 200, r.status
req = b"GET /v1/poll?topic=big0&topic=big1&topic=big2&topic=big3&last=256&timeout=0 HTTP/1.1\r\nhost: x\r\n\r\n"
print(f"request {len(req)} bytes")
time.sleep(1)
before = rss_mb()
socks = []
for _ in range(slow):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(req)
    socks.append(s)
time.sleep(wait)
after = rss_mb()
print(f"slow_readers={slow} rss_before={before:.1f}MB rss_after={after:.1f}MB added={after - before:.1f}MB")
for s in socks: s.close()
s = socket.create_connection(("127.0.0.1", port))
s.sendall(req)
data = b""
while b"\r\n\r\n" not in data: data += s.recv(65536)
head, body = data.split(b"\r\n\r\n", 1)
length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
while len(body) < length: body += s.recv(1 << 20)
answer = json.loads(body)
print(f"one answer: {length} bytes, {len(answer['messages'])} messages, more={answer.get('more')}")
