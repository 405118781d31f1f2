"""Per-key locks: the same key runs one at a time, other keys don't wait, and finished keys are forgotten."""

import threading
import time

import pytest

from services.deadline import NO_DEADLINE, Deadline
from services.engines import KeyedLocks
from services.errors import DeadlineExceededError


def test_same_key_runs_one_at_a_time_and_is_forgotten_afterwards() -> None:
    locks = KeyedLocks()
    inside = 0
    most_inside = 0
    counter_guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most_inside
        with locks.hold("ctx", NO_DEADLINE, "translation"):
            with counter_guard:
                inside += 1
                most_inside = max(most_inside, inside)
            time.sleep(0.02)
            with counter_guard:
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert most_inside == 1
    assert len(locks) == 0


def test_other_keys_do_not_wait() -> None:
    locks = KeyedLocks()
    with locks.hold("a", NO_DEADLINE, "translation"):
        with locks.hold("b", Deadline(0.5), "translation"):
            assert len(locks) == 2
    assert len(locks) == 0


def test_a_waiter_past_its_deadline_fails_and_leaves_no_lock_behind() -> None:
    locks = KeyedLocks()
    failures: list[Exception] = []

    def wait_briefly() -> None:
        try:
            with locks.hold("ctx", Deadline(0.05), "recompute"):
                pass
        except DeadlineExceededError as error:
            failures.append(error)

    with locks.hold("ctx", NO_DEADLINE, "recompute"):
        waiter = threading.Thread(target=wait_briefly)
        waiter.start()
        waiter.join()
        assert len(locks) == 1

    assert len(failures) == 1 and "same recompute in progress" in str(failures[0])
    assert len(locks) == 0


def test_an_error_inside_releases_the_key() -> None:
    locks = KeyedLocks()
    with pytest.raises(RuntimeError):
        with locks.hold("ctx", NO_DEADLINE, "translation"):
            raise RuntimeError("translation failed")
    assert len(locks) == 0
    with locks.hold("ctx", Deadline(0.1), "translation"):
        pass
