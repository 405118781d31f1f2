"""Translation cost at the card's operating point, as ``mot eval`` times it: per sample the fastest
of ``evaluation.TIMING_REPEATS`` translations (alignment, translator, head, recompute, loading) over
the fastest of as many native prefills, side by side in one process with the allocator tuned as the
CLI tunes it (``allocator.retain_freed_memory``); the median over samples.

To compare two versions of the code on one machine, run this same script against each checkout in
turn (``PYTHONPATH`` picks the ``mot_core`` it times), alternating, on an idle machine:

    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=/tmp/before python $PWD/reports/experiments/serving-cost/cost.py -t gemma3-270m)
    python reports/experiments/serving-cost/cost.py -t gemma3-270m
"""

import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import corpus_samples  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core  # noqa: E402
from mot_core import cache_ops  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.evaluation import Variant, time_translation  # noqa: E402
from mot_core.paths import mot_home  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.translator import serving_dtype  # noqa: E402

VALIDATION = mot_home() / "data/sotu/validation.jsonl"


class _Forgetful(dict):
    """A memo that never has the key asked for (``cache_ops._HEADS`` before 2026-12-05 remembered
    every context's head, so the fastest of N timed calls left out a new head's one-token pass)."""

    def __contains__(self, key: object) -> bool:
        return False


def main() -> None:
    parser = sample_parser(__doc__, samples=4, seed=7, corpus=VALIDATION)
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    parser.add_argument(
        "--fresh-head",
        action="store_true",
        help="forget remembered head caches before every call: what a context with a new first token paid "
        "before the head moved into the recompute pass (no-op for code that remembers only a BOS)",
    )
    args = parser.parse_args()
    if args.fresh_head and hasattr(cache_ops, "_HEADS"):
        cache_ops._HEADS = _Forgetful()
    tuned = retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    card = translator.card
    variant = Variant(point=card.operating_point)
    ratios = []
    for sample in corpus_samples(args, source.tokenizer):
        prepared = prepare(source, target, sample, 64, card.native_tail)
        native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, {"op": variant})
        ratios.append(translate_s["op"] / native_s)
    result = {
        "code": str(Path(mot_core.__file__).parents[1]),
        "corpus": str(args.corpus),
        "seed": args.seed,
        "target": target.name,
        "translator": card.version,
        "operating_point": None if variant.point is None else variant.point.label,
        "allocator_tuned": tuned,
        "bf16_matmuls": serving_dtype("cpu") == torch.bfloat16,
        "fresh_head": args.fresh_head,
        "median": round(statistics.median(ratios), 4),
        "ratios": [round(r, 4) for r in ratios],
    }
    report(result, args.out)


def report(result: dict, out: Path | None) -> None:
    """Print ``result`` as one JSON line, and append it to ``out`` (the runs' JSONL file) if given."""
    print(json.dumps(result))
    if out:
        with out.open("a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
