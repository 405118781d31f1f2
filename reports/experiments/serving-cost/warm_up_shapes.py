"""A translator's first call at a new row count, with and without ``warm_up_shapes`` first: 448
rows of random source features (spread over the experts as a context's are) through each shipped
translator, twice, after a first call at 64 rows (or after ``warm_up_shapes(N)``).

    python reports/experiments/serving-cost/warm_up_shapes.py 0      # no warm-up of the shapes
    python reports/experiments/serving-cost/warm_up_shapes.py 1024   # the service's default
"""

import sys
import time
from pathlib import Path

import torch

from mot_core.allocator import retain_freed_memory
from mot_core.translation.translator import load_translator

CHECKPOINTS = Path(__file__).resolve().parents[3] / "checkpoints"


@torch.no_grad()
def main(up_to_tokens: int) -> None:
    retain_freed_memory()  # as the CLI and the replicas do
    for name in ("smollm2-135m__gemma3-270m", "smollm2-135m__qwen2.5-0.5b"):
        translator = load_translator(CHECKPOINTS / name)
        rows = torch.randn(448, *translator.source_mean.shape)
        translator.inference_rows(rows[:64], all_positions=True)
        started = time.perf_counter()
        counts = translator.warm_up_shapes(up_to_tokens)
        warm_up = time.perf_counter() - started
        calls = []
        for _ in range(2):
            started = time.perf_counter()
            translator.inference_rows(rows, all_positions=True)
            calls.append(1000 * (time.perf_counter() - started))
        print(
            f"{name}: warm_up_shapes({up_to_tokens}) ran {counts} row counts in {warm_up:.2f} s; "
            f"448 rows: first call {calls[0]:.0f} ms, second {calls[1]:.0f} ms"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]))
