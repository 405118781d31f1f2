"""Ports for servers started later: outside the ranges Ray and the kernel hand out meanwhile."""

import socket

from services.ports import PORT_RANGE, free_port


def test_free_port_is_outside_ray_and_ephemeral_ranges_and_bindable():
    ephemeral_low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(20):
        port = free_port()
        assert PORT_RANGE[0] <= port <= PORT_RANGE[1] < ephemeral_low
        with socket.socket() as server:  # nothing holds it: a server can take it on all interfaces
            server.bind(("0.0.0.0", port))
