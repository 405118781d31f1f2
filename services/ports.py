"""Picking a free TCP port for a server started a moment later (local runs and tests).

Why not port 0 and keep the number: the server (Ray Serve's proxies, redis-server) binds it in
another process later, and in between every outgoing connection takes a port from the kernel's
ephemeral range (Linux: 32768-60999), and Ray's workers take 10002-19999. A port drawn at random
between the two, free on all interfaces now, is not handed out by either in the meantime.
"""

from __future__ import annotations

import errno
import random
import socket

PORT_RANGE = (20000, 32767)  # above Ray's worker ports, below the kernel's ephemeral ports


def free_port(attempts: int = 200) -> int:
    """A port in ``PORT_RANGE`` that nothing listens on, on any interface (IPv4 and IPv6)."""
    rng = random.SystemRandom()
    for _ in range(attempts):
        port = rng.randint(*PORT_RANGE)
        if _bindable(socket.AF_INET, "0.0.0.0", port) and (
            not socket.has_ipv6 or _bindable(socket.AF_INET6, "::", port)
        ):
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE[0]}-{PORT_RANGE[1]} after {attempts} tries")


def _bindable(family: socket.AddressFamily, host: str, port: int) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, port))
        return True
    except OSError as exc:
        # no IPv6 on this machine at all: only IPv4 counts
        return family == socket.AF_INET6 and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL)
