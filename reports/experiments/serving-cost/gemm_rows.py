"""What a recomputed token costs at the margin: every linear layer of the target's decoder as one
GEMM each, layer after layer (weights cold in cache, as in a forward pass), at a range of row
counts. At the ~100-160 rows of the shipped recompute a fixed part (reading the weights) is a
third of the time, so each extra row costs less than the average row of a prefill. Run it on an
idle machine.

    python reports/experiments/serving-cost/gemm_rows.py gemma3-270m
"""

import sys

import torch

from mot_core.benchmarks import median_seconds
from mot_core.loading import load_model

ROWS = (64, 80, 96, 101, 112, 128, 144, 160, 192, 224, 256, 1008)


@torch.inference_mode()
def main() -> None:
    target = load_model(sys.argv[1])
    linears = [m.weight for m in target.model.get_decoder().layers.modules() if isinstance(m, torch.nn.Linear)]
    for rows in ROWS:
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in linears}

        def run(inputs: dict[int, torch.Tensor] = inputs) -> None:
            for w in linears:
                torch.nn.functional.linear(inputs[w.shape[1]], w)

        run()  # warm-up
        seconds = median_seconds(run, 7)
        gflops = sum(2 * rows * w.numel() for w in linears) / seconds / 1e9
        print(f"{rows:5d} rows {seconds * 1e3:7.1f} ms  {seconds * 1e3 / rows:6.3f} ms/row  {gflops:6.0f} GFLOPS")


if __name__ == "__main__":
    main()
