#!/usr/bin/env python3
"""The client side of bench/egress.sh; times only its own loop (no process
start-up), and prints seconds.

  egress_client.py latency PROXY HOST PORT N MODE   N sequential new connections, one small
                                                     request each; MODE get (absolute URL
                                                     through the proxy) or connect (a CONNECT
                                                     tunnel, then the request); PROXY `none`
                                                     for a direct connection
  egress_client.py bulk PROXY HOST PORT             /big once, through a CONNECT tunnel
                                                     (or directly), read into one buffer
"""
import socket
import sys
import time


def proxy_addr(p):
    hostport = p.split("//", 1)[-1].rstrip("/")
    h, port = hostport.rsplit(":", 1)
    return h, int(port)


def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        got = s.recv(65536)
        if not got:
            raise SystemExit("closed before a reply: %r" % buf)
        buf += got
    head, rest = buf.split(b"\r\n\r\n", 1)
    if b" 200 " not in head.split(b"\r\n")[0]:
        raise SystemExit("refused: %r" % head)
    return head, rest


def open_to(proxy, host, port, mode):
    """A socket on which a request for origin-form path goes to host:port."""
    if proxy == "none":
        return socket.create_connection((host, port)), False
    s = socket.create_connection(proxy_addr(proxy))
    if mode == "connect":
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
        read_head(s)
        return s, False
    return s, True


def request(s, absolute, host, port, path):
    target = b"http://%s:%d%s" % (host.encode(), port, path) if absolute else path
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (target, host.encode(), port))


def body_len(head):
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    raise SystemExit("no length")


def latency(proxy, host, port, n, mode):
    start = time.perf_counter()
    for _ in range(n):
        s, absolute = open_to(proxy, host, port, mode)
        request(s, absolute, host, port, b"/small")
        head, rest = read_head(s)
        while len(rest) < body_len(head):
            rest += s.recv(4096)
        s.close()
    return time.perf_counter() - start


def bulk(proxy, host, port):
    start = time.perf_counter()
    s, absolute = open_to(proxy, host, port, "connect")
    request(s, absolute, host, port, b"/big")
    head, rest = read_head(s)
    want = body_len(head)
    got = len(rest)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while got < want:
        n = s.recv_into(view)
        if n == 0:
            raise SystemExit("short: %d of %d" % (got, want))
        got += n
    return time.perf_counter() - start


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "latency":
        print("%.6f" % latency(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]))
    else:
        print("%.6f" % bulk(sys.argv[2], sys.argv[3], int(sys.argv[4])))
