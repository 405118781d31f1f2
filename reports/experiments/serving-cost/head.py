"""What the target's head (position 0) costs in its own one-token pass, and as one more row of the
recompute pass, against the native prefill: per sample in one process, the fastest of
``REPEATS`` calls of each, alternating, with the allocator tuned as the CLI tunes it.

Before 2026-12-05 a blended cache got its head from ``cache_ops.replace_head``: a forward pass of one
token, which reads every weight of the target once. For a model with a BOS that pass is the same for
every context and was remembered; for one without (Qwen2.5), the head is the context's own first
token, and the pass was remembered too, so ``mot eval``'s fastest-of-N timing left it out while a
new context paid it. ``recompute.blend`` now recomputes the head with the chosen tokens.

    python reports/experiments/serving-cost/head.py -t qwen2.5-0.5b --samples 6
"""

import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.benchmarks import timed_runs  # noqa: E402
from mot_core.cache_ops import prefill, recompute_positions  # noqa: E402
from mot_core.translation.objective import operating_point_cache, prepare  # noqa: E402

REPEATS = 3


def best_seconds(target, card, cache, native_ids: torch.Tensor) -> dict[str, float]:
    """The fastest of ``REPEATS`` alternating calls of each step, for one sample."""
    # the operating point's share of positions, spread evenly (which ones does not change the cost)
    positions = torch.linspace(1, cache.seq_len - 1, round(card.recompute_fraction * cache.seq_len)).long()
    with_head = torch.cat((torch.zeros(1, dtype=torch.long), positions))
    steps = {
        "prefill": lambda: prefill(target, native_ids),
        "head pass": lambda: prefill(target, native_ids[:, :1]),
        "recompute": lambda: recompute_positions(target, cache, positions),
        "recompute + head row": lambda: recompute_positions(target, cache, with_head),
    }
    times = {name: [] for name in steps}
    for _ in range(REPEATS):
        for name, step in steps.items():
            times[name] += timed_runs(step, 1)
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    parser = sample_parser(__doc__, samples=6, seed=7, corpus=VALIDATION)
    parser.add_argument("--out", type=Path, help="write the result as JSON")
    args = parser.parse_args()
    retain_freed_memory()
    source, target, translator = models_and_translator(args)
    card = translator.card
    rows = []
    for sample in corpus_samples(args, source.tokenizer):
        prepared = prepare(source, target, sample, 64, card.native_tail)
        cache = operating_point_cache(translator, prepared, target)  # every position in every layer
        best = best_seconds(target, card, cache, prepared.target_ids[:, : prepared.keep])
        rows.append(
            {
                "head_pass_over_prefill": best["head pass"] / best["prefill"],
                "head_row_over_prefill": (best["recompute + head row"] - best["recompute"]) / best["prefill"],
                "seconds": best,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "target": target.name,
        "samples": len(rows),
        "median_head_pass_over_prefill": statistics.median(r["head_pass_over_prefill"] for r in rows),
        "median_head_row_over_prefill": statistics.median(r["head_row_over_prefill"] for r in rows),
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
