"""A UDP peer for the netlab's tests, run inside a namespace (`traffic`):

    python -m tests.dataplane.udp_peer receive ADDRESS PORT STEADY_S WAIT_S
    python -m tests.dataplane.udp_peer send ADDRESS PORT COUNT SIZE SECONDS

`receive` binds the address (a job's, in its site's local prefix), says `ready`, counts the
datagrams until none came for IDLE_S (or none at all for WAIT_S), and prints them as JSON:
packets, bytes, the bytes that came STEADY_S or more after the first, and the span from the
first to the last. `send` sends COUNT datagrams of SIZE bytes 0.5 ms apart, or (COUNT 0) as
many as it can for SECONDS, and prints how many the socket took.
"""

import json
import socket
import sys
import time

IDLE_S = 1.0
IPV6_FREEBIND = 78
SO_RCVBUFFORCE = 33


def receive(address: str, port: int, steady_s: float, wait_s: float) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sock.bind((address, port))
    print("ready", flush=True)
    sock.settimeout(wait_s)
    packets = total = steady = 0
    first = last = 0.0
    try:
        while True:
            size = len(sock.recv(65535))
            last = time.monotonic()
            if not packets:
                first = last
                sock.settimeout(IDLE_S)
            packets += 1
            total += size
            if last - first >= steady_s:
                steady += size
    except TimeoutError:
        pass
    said = {"packets": packets, "bytes": total, "steady_bytes": steady, "span_s": last - first}
    print(json.dumps(said), flush=True)


def send(address: str, port: int, count: int, size: int, seconds: float) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    payload = b"x" * size
    sent = 0
    end = time.monotonic() + seconds
    while (count and sent < count) or (not count and time.monotonic() < end):
        try:
            sock.sendto(payload, (address, port))
            sent += 1
        except OSError:
            pass
        if count:
            time.sleep(0.0005)
    print(sent, flush=True)


if __name__ == "__main__":
    action, address, port, *rest = sys.argv[1:]
    if action == "receive":
        receive(address, int(port), float(rest[0]), float(rest[1]))
    else:
        send(address, int(port), int(rest[0]), int(rest[1]), float(rest[2]))
