"""One thread for all of a CPU replica's torch work.

Ray Serve runs a deployment's sync methods on a pool of worker threads, and successive requests
land on different ones. On a CPU, every thread that runs torch ops becomes the master of its own
OpenMP team; once a process holds more OpenMP threads than there are cores, libgomp stops
spinning between parallel regions and every small op waits for its team to wake up. A
translation is hundreds of small ops: in one process on an idle 2-core CPU, ``translate()`` took
0.17-0.20 s on a second thread against 0.11-0.13 s on the first, and ``x + 1`` on a 0.8 MB tensor
2-3.6 times as long (docs/performance.md). So a CPU replica loads its model, warms up and serves
every model call on one thread, which is then the only OpenMP master in the process.

On a GPU the kernels of one device run one after another anyway, and a thread held while a
target waits for its translator would hold up that target's other requests: GPU replicas keep
Serve's threads (``confine=False`` runs each call where it is made).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


class ComputeThread:
    """Runs calls on one long-lived thread (``confine``) or where they are made."""

    def __init__(self, name: str, *, confine: bool) -> None:
        self._thread: int | None = None  # the compute thread's ident, once it runs
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=self._started) if confine else None
        )

    def _started(self) -> None:
        self._thread = threading.get_ident()

    def run(self, fn: Callable[..., T], /, *args, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the compute thread; its result or its exception. A call made
        on the compute thread itself runs at once (waiting for its own queue would never end: the
        garbage collector may close an abandoned stream on any thread)."""
        if self._pool is None or threading.get_ident() == self._thread:
            return fn(*args, **kwargs)
        return self._pool.submit(fn, *args, **kwargs).result()

    def iterate(self, items: Generator[T, None, None]) -> Iterator[T]:
        """Each item of ``items`` (a generator: a streamed generation) computed on the compute
        thread; closing this iterator closes ``items`` there too (a client that hung up)."""
        if self._pool is None:
            yield from items
            return
        try:
            while (item := self.run(next, items, _DONE)) is not _DONE:
                yield item
        finally:
            self.run(items.close)
