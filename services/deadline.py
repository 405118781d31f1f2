"""Request budgets: the client's deadline, carried through the service so work stops when it runs out.

Ray Serve's gRPC proxy does not hand gRPC deadlines to the application, so the client also sends
the time it has left as ``mot-timeout-ms`` metadata. The ingress turns that into a ``Deadline`` and
passes the remaining seconds to each deployment call, which makes its own ``Deadline`` from them
(budgets, not wall-clock instants: replicas may run on hosts whose clocks differ).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from services.errors import DeadlineExceededError

TIMEOUT_METADATA = "mot-timeout-ms"


class Deadline:
    def __init__(self, budget_s: float | None) -> None:
        self._at = None if budget_s is None else time.monotonic() + budget_s

    @classmethod
    def from_metadata(cls, metadata: Iterable[tuple[str, str]]) -> Deadline:
        """From the ``mot-timeout-ms`` metadata (no budget when absent or not a number)."""
        value = dict(metadata).get(TIMEOUT_METADATA)
        try:
            return cls(max(0.0, int(value) / 1000)) if value is not None else cls(None)
        except ValueError:
            return cls(None)

    def remaining(self) -> float | None:
        """Seconds left (None: no deadline); what a downstream call is given as its budget."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())

    def check(self, doing: str) -> None:
        """Raise before starting ``doing`` when the budget is spent."""
        if self._at is not None and time.monotonic() >= self._at:
            raise DeadlineExceededError(f"deadline exceeded before {doing}; the request's budget is spent")


NO_DEADLINE = Deadline(None)
