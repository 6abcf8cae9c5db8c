#!/usr/bin/env python3
"""CPU the server spends per ping a client sends: N WebSockets on 127.0.0.1 each send
`pings` pings one at a time (waiting for the pong); the server's utime+stime (from
/proc/<pid>/stat) before and after, divided by the pings.
Usage: bench-reply-cost.py PID PORT MODE CONNS PINGS [SIZE]
MODE: deflate (a JSON ping of ~SIZE bytes of records, default 64 KB: 19 KB compressed;
      sent compressed, deflate negotiated), plain (the same ping, no extension), msgpack (herald.msgpack, SIZE nils), msgpack-bin
      (herald.msgpack, one bin of SIZE bytes)."""
import os, socket, struct, sys, time, zlib

pid, port, mode, conns, pings = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
size = int(sys.argv[6]) if len(sys.argv) > 6 else 60000
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def frame(opcode, payload, rsv1=False):
    b0 = 0x80 | opcode | (0x40 if rsv1 else 0)
    n = len(payload)
    if n < 126: h = bytes([b0, 0x80 | n])
    elif n < 65536: h = bytes([b0, 0x80 | 126]) + struct.pack(">H", n)
    else: h = bytes([b0, 0x80 | 127]) + struct.pack(">Q", n)
    mask = b"\x01\x02\x03\x04"
    return h + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))

def read_exact(s, n):
    out = b""
    while len(out) < n:
        c = s.recv(n - len(out))
        if not c: raise EOFError
        out += c
    return out

def read_frame(s):
    b0, b1 = read_exact(s, 2)
    n = b1 & 0x7f
    if n == 126: n = struct.unpack(">H", read_exact(s, 2))[0]
    elif n == 127: n = struct.unpack(">Q", read_exact(s, 8))[0]
    return b0, read_exact(s, n)

def connect():
    s = socket.create_connection(("127.0.0.1", port))
    ext = "sec-websocket-extensions: permessage-deflate; client_max_window_bits\r\n" if mode == "deflate" else ""
    proto = "sec-websocket-protocol: herald.msgpack\r\n" if mode.startswith("msgpack") else ""
    s.sendall(("GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
               "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               + ext + proto + "\r\n").encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"): head += read_exact(s, 1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s

def records(n):
    """~n bytes of JSON records with random fields: compresses about 3.3x (19 KB of 64 KB)."""
    import random
    random.seed(7)
    words = ["sensor", "state", "ok", "alpha", "beta", "gamma", "temp", "id", "value",
             "north", "south", "east", "west", "unit", "kelvin"]
    out, size = [], 0
    while size < n:
        rec = '{"id":%d,"n":"%s-%s","v":%d.%03d,"t":"%s"}' % (
            random.randint(0, 99999), random.choice(words), random.choice(words),
            random.randint(0, 999), random.randint(0, 999),
            "".join(random.choice("abcdef0123456789") for _ in range(6)))
        out.append(rec)
        size += len(rec) + 1
    return ("[" + ",".join(out) + "]").encode()

if mode in ("deflate", "plain"):
    ping = b'{"type":"ping","data":' + records(size if len(sys.argv) > 6 else 63900) + b"}"
    if mode == "deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        body = c.compress(ping) + c.flush(zlib.Z_SYNC_FLUSH)
        assert body.endswith(b"\x00\x00\xff\xff")
        msg = frame(1, body[:-4], rsv1=True)
    else:
        msg = frame(1, ping)
elif mode == "msgpack":
    body = b"\x82\xa4type\xa4ping\xa4data\xdd" + struct.pack(">I", size) + b"\xc0" * size
    msg = frame(2, body)
else:
    body = b"\x82\xa4type\xa4ping\xa4data\xc6" + struct.pack(">I", size) + b"z" * size
    msg = frame(2, body)

socks = [connect() for _ in range(conns)]
wire = len(msg)
start_cpu, start = cpu(), time.time()
rsv1 = 0
for s in socks:
    for _ in range(pings):
        s.sendall(msg)
        while True:
            b0, payload = read_frame(s)
            if b0 & 0x0f in (1, 2): break
        rsv1 += 1 if b0 & 0x40 else 0
        assert b0 & 0x0f != 8, payload
cpu_used = cpu() - start_cpu
n = conns * pings
print(f"mode={mode} pings={n} wire={wire}B server_cpu={cpu_used:.3f}s per_ping={cpu_used / n * 1000:.3f}ms compressed_pongs={rsv1} wall={time.time() - start:.1f}s")
