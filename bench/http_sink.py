#!/usr/bin/python3
"""bench/http_sink.py - a do-nothing HTTP/1.1 sink for the loopback floor.

Reads one request at a time per connection (Content-Length body, discarded)
and answers 201 with an empty JSON object.  Used by upload_throughput.sh to
measure what curl + loopback cost without interpd.  Prints the port on fd
given as argv[1] (like interpd's --ready-fd) and serves until killed.
"""
import os
import socket
import sys


def serve(conn):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    pending = b""
    while True:
        while b"\r\n\r\n" not in pending:
            chunk = conn.recv(65536)
            if not chunk:
                return
            pending += chunk
        head, _, rest = pending.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
            if k.strip().lower() == b"expect" and b"100" in v:
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        left = length - len(rest)
        pending = b"" if left >= 0 else rest[length:]
        while left > 0:
            n = conn.recv_into(view, min(left, len(buf)))
            if n == 0:
                return
            left -= n
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\n\r\n{}")


def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    fd = int(sys.argv[1])
    os.write(fd, b"%d\n" % s.getsockname()[1])
    os.close(fd)
    while True:
        conn, _ = s.accept()
        with conn:
            serve(conn)


if __name__ == "__main__":
    main()
