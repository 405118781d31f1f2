"""What a new context's translation costs, against the same translation repeated.

``mot eval`` and ``mot bench-translation`` time each context's translation as the fastest of
back-to-back calls; a served request translates each context once. Per context (cut from the
validation speeches), the first call of ``translate()`` at the card's operating point (the
alignment, the translator, assembling the cache; not the recompute, whose shapes do not matter,
nor loading) and the fastest of the next ``--repeats``, with the target's native prefill (the
fastest of as many) as the unit. The first context of a process is left out (it builds every
kernel, as a replica's warm-up does).

    python reports/experiments/serving-cost/new_context.py -t gemma3-270m --samples 9
"""

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parent))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION, report  # noqa: E402
from parts import translating  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.benchmarks import timed_runs  # noqa: E402
from mot_core.cache_ops import prefill  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.translator import serving_dtype  # noqa: E402


@torch.no_grad()
def main() -> None:
    parser = sample_parser(__doc__, samples=9, seed=7, corpus=VALIDATION)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    first, fastest = [], []
    for i, sample in enumerate(corpus_samples(args, source.tokenizer)):
        prepared = prepare(source, target, sample, 64, translator.card.native_tail)
        native = min(timed_runs(lambda p=prepared: prefill(target, p.target_ids[:, : p.keep]), args.repeats))
        translate = translating(source, target, translator, prepared, sample.context)
        started = time.perf_counter()
        translate()
        once = time.perf_counter() - started
        again = min(timed_runs(translate, args.repeats))
        if i:  # the process's first context builds every kernel
            first.append(once / native)
            fastest.append(again / native)
        print(
            f"{prepared.keep:5d} tokens: first call {once:.3f} s, fastest of the next {args.repeats} {again:.3f} s, "
            f"prefill {native:.3f} s"
        )
    result = {
        "code": str(Path(mot_core.__file__).parents[1]),
        "target": target.name,
        "bf16_matmuls": serving_dtype("cpu") == torch.bfloat16,
        "first_call_median": round(statistics.median(first), 4),
        "fastest_median": round(statistics.median(fastest), 4),
        "first_call": [round(r, 4) for r in first],
        "fastest": [round(r, 4) for r in fastest],
    }
    report(result, args.out)


if __name__ == "__main__":
    main()
