#!/usr/bin/env python3
"""The least a forwarding proxy can do, for bench/egress.sh's bulk part: a
CONNECT relay with no policy, no record and no TLS check, that answers
`200` and then moves bytes each way with splice(2) through a 1 MiB pipe (the
kernel work of any proxy that passes a stream on through a second TCP
connection). Prints its port, then serves until killed.

  egress_relay.py
"""
import os
import socket
import threading

PIPE = 1 << 20


def pump(src, dst):
    r, w = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(w, 1031, PIPE)  # F_SETPIPE_SZ
    except OSError:
        pass
    try:
        while True:
            n = os.splice(src.fileno(), w, PIPE)
            if n == 0:
                break
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        got = c.recv(4096)
        if not got:
            return
        head += got
    target = head.split(b" ", 2)[1].decode()
    host, port = target.rsplit(":", 1)
    up = socket.create_connection((host, int(port)))
    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    back = threading.Thread(target=pump, args=(up, c), daemon=True)
    back.start()
    pump(c, up)
    back.join()
    c.close()
    up.close()


def main():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
