"""Why the recompute of 10% of the tokens costs ~0.16x of a prefill, not 0.10x: the torch profiler's
top operators of ``recompute.blend`` (the card's operating point) and of the native prefill on one
sample, then the target's own linear layers as plain GEMMs (weights of every layer, so cold in
cache as in a forward pass) with as many rows as the recompute has and as the prefill has. Run it
on an idle machine.

    python reports/experiments/serving-cost/profile_recompute.py -t gemma3-270m
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.cache_ops import prefill, replace_head  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.recompute import blend  # noqa: E402


def median_seconds(step, repeats: int) -> float:
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gemm_rate(target, rows: int) -> float:
    """GFLOPS of every linear layer of the target's decoder applied to ``rows`` rows, layer after layer."""
    linears = [m.weight for m in target.model.get_decoder().layers.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in linears}

    def run():
        for w in linears:
            torch.nn.functional.linear(inputs[w.shape[1]], w)

    seconds = median_seconds(run, 5)
    return sum(2 * rows * w.numel() for w in linears) / seconds / 1e9


@torch.inference_mode()
def main() -> None:
    parser = sample_parser(__doc__, samples=1, seed=7, corpus=VALIDATION)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    card = translator.card
    sample = corpus_samples(args, source.tokenizer)[0]
    prepared = prepare(source, target, sample, 64, card.native_tail)
    ids = prepared.target_ids[:, : prepared.keep]
    translated = translator.translate(
        prepared.source_cache,
        sample.context,
        source_spec=source.spec,
        source_tokenizer=source.tokenizer,
        target_spec=target.spec,
        target_tokenizer=target.tokenizer,
        target_first_layer=target,
        all_positions=True,
    )
    cache = replace_head(target, translated.cache)
    recompute = median_seconds(lambda: blend(target, cache, card.operating_point), args.repeats)
    native = median_seconds(lambda: prefill(target, ids), args.repeats)
    ratio = recompute / native
    print(f"{target.name}: {ids.shape[-1]} tokens; recompute {recompute:.3f} s, prefill {native:.3f} s ({ratio:.3f}x)")
    for name, step in (
        ("recompute", lambda: blend(target, cache, card.operating_point)),
        ("prefill", lambda: prefill(target, ids)),
    ):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(f"\n{name}: top operators by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6))
    recomputed = round(card.recompute_fraction * ids.shape[-1])
    for rows in (recomputed, ids.shape[-1]):
        print(f"the target's linear layers as GEMMs with {rows} rows: {gemm_rate(target, rows):.0f} GFLOPS")


if __name__ == "__main__":
    main()
