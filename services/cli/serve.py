"""``mot serve``: the whole service on this machine until Ctrl-C or SIGTERM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mot_core.errors import MotError


def serve(
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            exists=True,
            dir_okay=False,
            help="Service config (YAML): source and target models, translators, ports, store, limits.",
        ),
    ],
    num_cpus: Annotated[
        int | None, typer.Option("--num-cpus", min=1, help="CPUs Ray may schedule on (default: all of this machine).")
    ] = None,
    ready_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for the gRPC proxy to answer after start.")
    ] = 120.0,
) -> None:
    """Run the whole service on this machine until Ctrl-C or SIGTERM.

    Starts the cache store, a local Ray instance, Ray Serve's gRPC proxy on the config's grpc_port, and the app.

    Cache store: a private redis-server (loopback, random password, nothing persisted), or $MOT_REDIS_URL if set.

    Prints the gRPC address and the application name that clients send as the `application` metadata.

    Blocks until Ctrl-C or SIGTERM, then stops Serve, Ray and the embedded Redis, and exits 0.

    Set $MOT_API_TOKEN to require `authorization: Bearer <token>` on every call. Secrets come from the environment.
    """
    import os
    import signal
    import threading

    from services.app import APP_NAME
    from services.client import MotClient, MotClientError
    from services.runner import REDIS_URL_ENV, LocalService
    from services.store import redact_url

    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second Ctrl-C while shutting down: give up waiting
            raise KeyboardInterrupt
        typer.echo(f"received {signal.Signals(signum).name}; shutting down", err=True)
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    service = LocalService(config, num_cpus=num_cpus)
    try:
        try:
            service.start()
        except Exception as exc:
            service.stop()
            if isinstance(exc, MotError):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise MotError(f"the service did not start: {first} (Ray's logs: /tmp/ray/session_latest/logs)") from exc
        try:
            if service.redis is not None:
                store = "embedded redis-server (private, loopback, password-protected, not persisted)"
            else:
                store = f"{REDIS_URL_ENV} ({redact_url(os.environ.get(REDIS_URL_ENV, ''))})"
            with MotClient(service.grpc_address) as client:
                try:
                    models = client.wait_ready(timeout=ready_timeout) if not stop.is_set() else []
                except MotClientError as exc:
                    raise MotError(f"the service started but its gRPC proxy does not answer: {exc}") from exc
            typer.echo(f"gRPC address: {service.grpc_address} (port {service.config.grpc_port}, all interfaces)")
            typer.echo(f"application: {APP_NAME} (clients send it as the 'application' metadata)")
            typer.echo(f"redis: {store}")
            typer.echo(f"metrics: Prometheus on port {service.config.metrics_port} (ray_mot_* among Ray's own)")
            for m in models:
                typer.echo(f"model: {m.role} {m.name} ({m.model_type}{', translator' if m.translator else ''})")
            typer.echo("ready; Ctrl-C or SIGTERM stops the service")
            while not stop.wait(0.5):
                pass
        finally:
            service.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    typer.echo("stopped")
