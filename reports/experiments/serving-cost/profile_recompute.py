"""Why the recompute of 10% of the tokens costs ~0.16x of a prefill, not 0.10x: the torch profiler's
top operators of ``recompute.blend`` (the card's operating point) and of the native prefill on one
sample, then the target's own linear layers as plain GEMMs (weights of every layer, so cold in
cache as in a forward pass) with as many rows as the recompute has and as the prefill has. Run it
on an idle machine.

    python reports/experiments/serving-cost/profile_recompute.py -t gemma3-270m
"""

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from parts import one_sample  # noqa: E402

from mot_core.benchmarks import median_seconds  # noqa: E402
from mot_core.cache_ops import prefill  # noqa: E402
from mot_core.translation.recompute import blend  # noqa: E402


def gemm_rate(target, rows: int) -> float:
    """GFLOPS of every linear layer of the target's decoder applied to ``rows`` rows, layer after layer."""
    linears = [m.weight for m in target.model.get_decoder().layers.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in linears}

    def run():
        for w in linears:
            torch.nn.functional.linear(inputs[w.shape[1]], w)

    run()  # warm-up
    seconds = median_seconds(run, 5)
    return sum(2 * rows * w.numel() for w in linears) / seconds / 1e9


@torch.inference_mode()
def main() -> None:
    args, _, target, translator, _, prepared, translate = one_sample(__doc__)
    card = translator.card
    ids = prepared.target_ids[:, : prepared.keep]
    cache = translate().cache  # blend recomputes the head (position 0) in its pass
    steps = {"recompute": lambda: blend(target, cache, card.operating_point), "prefill": lambda: prefill(target, ids)}
    for step in steps.values():
        step()  # warm-up
    recompute, native = (median_seconds(step, args.repeats) for step in steps.values())
    ratio = recompute / native
    print(f"{target.name}: {ids.shape[-1]} tokens; recompute {recompute:.3f} s, prefill {native:.3f} s ({ratio:.3f}x)")
    for name, step in steps.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(f"\n{name}: top operators by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6))
    recomputed = round(card.recompute_fraction * ids.shape[-1])
    for rows in (recomputed, ids.shape[-1]):
        print(f"the target's linear layers as GEMMs with {rows} rows: {gemm_rate(target, rows):.0f} GFLOPS")


if __name__ == "__main__":
    main()
