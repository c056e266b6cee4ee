#!/usr/bin/env python3
"""A local HTTP/1.1 origin for bench/egress.sh: `/small` answers two bytes,
`/big` answers the file given (sent with sendfile, so the server is not the
bottleneck of a bulk transfer). One request per connection. Prints its port."""
import os
import socket
import sys
import threading

big = sys.argv[1]
size = os.path.getsize(big)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(1024)
print(srv.getsockname()[1], flush=True)


def serve(c):
    try:
        buf = b""
        while b"\r\n\r\n" not in buf:
            got = c.recv(4096)
            if not got:
                return
            buf += got
        path = buf.split(b" ", 2)[1]
        if path.endswith(b"/big"):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
            with open(big, "rb") as f:
                sent = 0
                while sent < size:
                    n = os.sendfile(c.fileno(), f.fileno(), sent, size - sent)
                    if n == 0:
                        break
                    sent += n
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    except OSError:
        pass
    finally:
        c.close()


while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
