"""services.compute.ComputeThread: a CPU replica's model work on one thread, streams included."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.compute import ComputeThread


def _thread() -> int:
    return threading.get_ident()


def test_confined_calls_run_on_one_thread_whichever_thread_makes_them():
    compute = ComputeThread("test-compute", confine=True)
    with ThreadPoolExecutor(max_workers=4) as callers:  # as Serve's request threads make them
        seen = set(callers.map(lambda _: compute.run(_thread), range(8)))
    seen.add(compute.run(_thread))
    assert len(seen) == 1
    assert seen != {threading.get_ident()}


def test_unconfined_calls_run_where_they_are_made():
    compute = ComputeThread("test-compute", confine=False)
    assert compute.run(_thread) == threading.get_ident()


def test_a_call_returns_its_result_and_raises_its_exception():
    compute = ComputeThread("test-compute", confine=True)
    assert compute.run(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        compute.run(divmod, 1, 0)


def test_a_stream_is_computed_item_by_item_on_the_compute_thread_and_closed_there():
    compute = ComputeThread("test-compute", confine=True)
    worker = compute.run(_thread)
    where, closed_on = [], []

    def tokens():
        try:
            for token in ("a", "b", "c"):
                where.append(threading.get_ident())
                yield token
        finally:
            closed_on.append(threading.get_ident())

    assert list(compute.iterate(tokens())) == ["a", "b", "c"]
    assert set(where) == {worker} and closed_on == [worker]

    stream = compute.iterate(tokens())  # a client that hangs up after the first token
    assert next(stream) == "a"
    stream.close()
    assert closed_on == [worker, worker]


def test_an_error_in_a_stream_reaches_the_caller():
    compute = ComputeThread("test-compute", confine=True)

    def failing():
        yield "a"
        raise ValueError("bad prompt")

    stream = compute.iterate(failing())
    assert next(stream) == "a"
    with pytest.raises(ValueError, match="bad prompt"):
        next(stream)


def test_a_call_from_the_compute_thread_itself_runs_at_once():
    """A stream abandoned by its client may be closed by the garbage collector on the compute thread:
    its close, a call to the compute thread, must not wait behind itself."""
    compute = ComputeThread("test-compute", confine=True)
    worker = compute.run(_thread)
    nested = []
    caller = threading.Thread(target=lambda: nested.append(compute.run(lambda: compute.run(_thread))), daemon=True)
    caller.start()
    caller.join(timeout=10)
    if caller.is_alive():  # waiting behind itself: unblock it (cancelling the inner call) and fail
        compute._pool.shutdown(wait=False, cancel_futures=True)
    assert nested == [worker]

    def tokens():
        yield "a"
        yield "b"

    stream = compute.iterate(tokens())
    assert next(stream) == "a"
    compute.run(stream.close)  # closing the outer stream on the compute thread
    with pytest.raises(StopIteration):
        next(stream)
