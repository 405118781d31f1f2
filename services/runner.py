"""Start and stop the whole service on this machine: Redis, Ray, Serve's gRPC proxy, the app.

``mot serve``, ``make demo`` and the integration tests all start the service through
``LocalService``, so they exercise exactly what an operator runs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from mot_core.allocator import malloc_environment
from services.app import APP_NAME, GRPC_SERVICER_FUNCTIONS, ROUTE_PREFIX, build_app
from services.config import load_config
from services.embedded_redis import redis_url_from_env_or_embedded
from services.ports import free_port

log = logging.getLogger(__name__)

REDIS_URL_ENV = "MOT_REDIS_URL"


class LocalService:
    """Context manager: the service on loopback, with the embedded Redis unless MOT_REDIS_URL is set."""

    def __init__(self, config: dict[str, Any] | Path | str, *, num_cpus: int | None = None) -> None:
        if isinstance(config, (str, Path)):
            import yaml

            config = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
        self.args = config
        self.config = load_config(config)
        self.num_cpus = num_cpus
        self.redis = None
        self.redis_url = ""
        self.app_running = False  # serve.run returned: stop() drains the app's replicas
        self.replica_logs: Path | None = None  # Serve's log files, one per replica, once started

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.config.grpc_port}"

    def start(self) -> LocalService:
        import ray
        from ray import serve
        from ray.serve.config import gRPCOptions

        started = time.perf_counter()
        self.redis_url, self.redis = redis_url_from_env_or_embedded(self.config.store)
        log.info("cache store: %s", "embedded redis-server" if self.redis else "MOT_REDIS_URL")
        env = {REDIS_URL_ENV: self.redis_url, "TOKENIZERS_PARALLELISM": "false", **malloc_environment()}
        for passthrough in ("MOT_HOME", "MOT_API_TOKEN", "HF_HUB_OFFLINE", "OMP_NUM_THREADS"):
            if os.environ.get(passthrough):
                env[passthrough] = os.environ[passthrough]
        in_main_thread = threading.current_thread() is threading.main_thread()
        sigterm_handler = signal.getsignal(signal.SIGTERM) if in_main_thread else None
        ray_context = ray.init(
            num_cpus=self.num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": env},
            _metrics_export_port=self.config.metrics_port,
        )
        self.replica_logs = Path(ray_context.address_info["session_dir"]) / "logs" / "serve"
        if callable(sigterm_handler):
            # ray.init replaces SIGTERM's handler with its native crash handler, which aborts the process
            # (leaving Ray's processes and Redis running); keep the caller's, which shuts down cleanly.
            signal.signal(signal.SIGTERM, sigterm_handler)
        serve.start(
            # Serve's HTTP proxy is unused (the API is gRPC) but runs beside it: keep it on loopback.
            http_options={"host": "127.0.0.1", "port": free_port(), "location": "HeadOnly"},
            grpc_options=gRPCOptions(
                port=self.config.grpc_port,
                grpc_servicer_functions=GRPC_SERVICER_FUNCTIONS,
                enable_reflection=True,  # grpcurl / Postman discover mot.v1 without the .proto
            ),
        )
        serve.run(build_app(self.args), name=APP_NAME, route_prefix=ROUTE_PREFIX)
        self.app_running = True
        log.info(
            "service up in %.1f s; gRPC at %s (application %r); replica logs in %s",
            time.perf_counter() - started,
            self.grpc_address,
            APP_NAME,
            self.replica_logs,
        )
        return self

    def stop(self) -> None:
        import ray
        from ray import serve

        try:
            if self.app_running:
                # Deleting the app drains its replicas; Serve's controller and proxies end with this
                # private Ray instance. (serve.shutdown() would end them itself, but Ray retries its call
                # to the controller after the controller has killed itself, and prints a spurious
                # "Task ServeController.graceful_shutdown failed" at every stop: ray-project/ray#35391.)
                serve.delete(APP_NAME)
                self.app_running = False
        finally:
            ray.shutdown()
            if self.redis is not None:
                self.redis.stop()
                self.redis = None

    def __enter__(self) -> LocalService:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
