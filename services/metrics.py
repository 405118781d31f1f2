"""Prometheus metrics of the service, through Ray's metrics API.

Ray aggregates every replica's metrics and serves them in Prometheus format on its metrics
export port (``metrics_port`` in the service config; on Kubernetes, the port the chart's
ServiceMonitor scrapes), so each deployment only records what happened. The exporter puts
``ray_`` before each name: ``mot_events_total`` is scraped as ``ray_mot_events_total``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from ray.serve import metrics

_SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]

_requests = None
_seconds = None
_bytes = None


def _instruments():
    global _requests, _seconds, _bytes
    if _requests is None:
        _requests = metrics.Counter(
            "mot_events_total", "Requests and cache outcomes by component and kind.", tag_keys=("component", "kind")
        )
        _seconds = metrics.Histogram(
            "mot_step_seconds",
            "Seconds spent per step (prefill, translate, ttft, warm_up at replica start).",
            _SECONDS_BUCKETS,
            tag_keys=("component", "step"),
        )
        _bytes = metrics.Counter("mot_stored_bytes_total", "Bytes written to the cache store.", tag_keys=("component",))
    return _requests, _seconds, _bytes


class WarmsUp(Protocol):
    def warm_up(self) -> float: ...


class ServiceMetrics:
    def __init__(self, component: str) -> None:
        self.component = component

    def count(self, kind: str, n: int = 1) -> None:
        _instruments()[0].inc(n, tags={"component": self.component, "kind": kind})

    def observe(self, step: str, seconds: float) -> None:
        _instruments()[1].observe(seconds, tags={"component": self.component, "step": step})

    def stored(self, nbytes: int) -> None:
        _instruments()[2].inc(nbytes, tags={"component": self.component})

    def warm_up(self, engine: WarmsUp) -> float:
        """Run ``engine.warm_up()`` (the replica's paths once, at start), recorded as step ``warm_up``."""
        seconds = engine.warm_up()
        self.observe("warm_up", seconds)
        return seconds

    @contextmanager
    def time(self, step: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.observe(step, time.perf_counter() - started)
