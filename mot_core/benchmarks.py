"""Foundation benchmark: native prefill vs codec cost, measured side by side in one run.

Absolute times on a shared CPU are noisy; the ratios (codec time / prefill time) are the
numbers to read. Each figure is the median of ``repeats`` runs.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from mot_core import codec
from mot_core.cache_ops import prefill
from mot_core.loading import LoadedModel
from mot_core.roundtrip import context_token_ids, demo_text

GB = 1e9


def timed_runs(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` back-to-back calls of ``fn``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(timed_runs(fn, repeats))


@dataclass
class CodecRow:
    model: str
    context_tokens: int
    prefill_s: float
    dtype: str
    encoded_mb: float
    encode_gbps: float
    decode_gbps: float
    codec_over_prefill: float  # (encode + decode) / prefill


def bench_codec(
    lm: LoadedModel, context_tokens: int = 1024, repeats: int = 3, dtypes: tuple[str, ...] = ("bfloat16", "int8")
) -> list[CodecRow]:
    text = demo_text()
    ids = context_token_ids(lm, text, context_tokens)
    if ids.shape[-1] < context_tokens:
        raise ValueError(f"demo text has only {ids.shape[-1]} tokens for {lm.name}")
    prefill(lm, ids[:, :16])  # warm-up (allocations, kernels)
    prefill_s = median_seconds(lambda: prefill(lm, ids), repeats)
    cache, _ = prefill(lm, ids)
    rows = []
    for dtype in dtypes:
        blob = codec.encode(cache, dtype)
        encode_s = median_seconds(lambda dtype=dtype: codec.encode(cache, dtype), repeats + 2)
        decode_s = median_seconds(lambda blob=blob: codec.decode(blob), repeats + 2)
        rows.append(
            CodecRow(
                lm.name,
                ids.shape[-1],
                prefill_s,
                dtype,
                len(blob) / 1e6,
                len(blob) / GB / encode_s,
                len(blob) / GB / decode_s,
                (encode_s + decode_s) / prefill_s,
            )
        )
    return rows


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``platform.processor()`` elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def set_benchmark_threads(threads: int | None) -> int:
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()
