#!/usr/bin/env python3
"""A counting HTTP proxy in front of an S3 server, for bench/s3-vs-juicefs.sh.

    s3-count-proxy.py LISTEN_PORT UPSTREAM_PORT COUNTS_FILE [UPLOAD_BYTES_PER_S]

Forwards every loopback connection on LISTEN_PORT to 127.0.0.1:UPSTREAM_PORT byte for
byte, and counts the requests clients send by method (PUT, GET, POST, DELETE, HEAD) and
the request and response payload bytes. It parses only what it needs to find where one
request ends and the next begins on a kept-alive connection: the header block, then a
body of Content-Length bytes or chunked transfer coding. The counts are rewritten to
COUNTS_FILE as one JSON object every 100 ms, so a benchmark reads them before and after
each phase and takes the difference. With UPLOAD_BYTES_PER_S, what clients send is paced
to that rate across all connections together (one link's upload bandwidth); answers are
not paced.
"""
import json
import os
import socket
import sys
import threading
import time

counts = {"PUT": 0, "GET": 0, "POST": 0, "DELETE": 0, "HEAD": 0, "other": 0, "up_bytes": 0, "down_bytes": 0}
lock = threading.Lock()


class Pace:
    """A shared upload link: each chunk leaves no sooner than the bytes before it allow."""

    def __init__(self, rate):
        self.rate, self.next, self.lock = rate, time.monotonic(), threading.Lock()

    def wait(self, n):
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + n / self.rate
        if start > now:
            time.sleep(start - now)


pace = Pace(0)


def add(key, n=1):
    with lock:
        counts[key] = counts.get(key, 0) + n


class Reader:
    """Buffered reads from the client socket that also forward what they consume."""

    def __init__(self, src, dst):
        self.src, self.dst, self.buf = src, dst, b""

    def fill(self):
        data = self.src.recv(1 << 16)
        if not data:
            raise EOFError
        self.buf += data

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        pace.wait(len(out))
        self.dst.sendall(out)
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        i = self.buf.index(b"\r\n") + 2
        return self.take(i)

    def forward(self, n):
        """Forward n body bytes without keeping them."""
        while n > 0:
            if not self.buf:
                self.fill()
            k = min(n, len(self.buf))
            self.take(k)
            n -= k


def close_both(c, s):
    """End both directions of a proxied connection (the other thread's recv returns)."""
    for x in (c, s):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def client_to_server(c, s):
    r = Reader(c, s)
    try:
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += r.line()
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ", 1)[0]
            add(method if method in counts else "other")
            hdr = {}
            for ln in lines[1:]:
                if ":" in ln:
                    k, v = ln.split(":", 1)
                    hdr[k.strip().lower()] = v.strip()
            if "chunked" in hdr.get("transfer-encoding", "").lower():
                while True:
                    size = int(r.line().split(b";")[0].strip(), 16)
                    r.forward(size)
                    add("up_bytes", size)
                    r.line()
                    if size == 0:
                        break
            else:
                n = int(hdr.get("content-length", "0"))
                r.forward(n)
                add("up_bytes", n)
    except (EOFError, OSError, ValueError):
        pass
    finally:
        close_both(c, s)


def server_to_client(s, c):
    try:
        while True:
            data = s.recv(1 << 16)
            if not data:
                break
            add("down_bytes", len(data))
            c.sendall(data)
    except OSError:
        pass
    finally:
        close_both(c, s)


def dump(path):
    while True:
        with lock:
            text = json.dumps(counts)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        time.sleep(0.1)


def main():
    global pace
    listen, upstream, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    pace = Pace(float(sys.argv[4]) if len(sys.argv) > 4 else 0)
    threading.Thread(target=dump, args=(path,), daemon=True).start()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(128)
    while True:
        c, _ = srv.accept()
        try:
            s = socket.create_connection(("127.0.0.1", upstream))
        except OSError:
            c.close()
            continue
        for x in (c, s):
            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=client_to_server, args=(c, s), daemon=True).start()
        threading.Thread(target=server_to_client, args=(s, c), daemon=True).start()


if __name__ == "__main__":
    main()
