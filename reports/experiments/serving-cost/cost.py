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

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402

import mot_core  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.evaluation import Variant, time_translation  # noqa: E402
from mot_core.loading import load_model  # noqa: E402
from mot_core.paths import mot_home  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.translator import load_translator  # noqa: E402
from services.engines import resolve_translator_path  # noqa: E402


def sample_parser(description: str, samples: int) -> argparse.ArgumentParser:
    """The options of the scripts here: the target and the validation samples that
    ``compare.corpus_samples`` cuts."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--corpus", type=Path, default=mot_home() / "data/sotu/validation.jsonl")
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--context-tokens", type=int, default=1024)
    return parser


def shipped_pair(target_name: str) -> tuple:
    """Source, target and the shipped translator of the pair, the allocator tuned first as the CLI
    tunes it (whether it was, last)."""
    tuned = retain_freed_memory()
    source, target = load_model("smollm2-135m"), load_model(target_name)
    return source, target, load_translator(resolve_translator_path(f"smollm2-135m__{target.name}")), tuned


def main() -> None:
    parser = sample_parser(__doc__, samples=4)
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    args = parser.parse_args()
    source, target, translator, tuned = shipped_pair(args.target)
    card = translator.card
    variant = Variant(
        recompute=card.recompute_fraction, selection=card.recompute_selection, recent=card.recompute_recent
    )
    ratios = []
    for sample in corpus_samples(args, source.tokenizer):
        prepared = prepare(source, target, sample, 64, card.native_tail)
        native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, {"op": variant})
        ratios.append(translate_s["op"] / native_s)
    result = {
        "code": str(Path(mot_core.__file__).parents[1]),
        "target": target.name,
        "allocator_tuned": tuned,
        "bf16_matmuls": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "median": round(statistics.median(ratios), 4),
        "ratios": [round(r, 4) for r in ratios],
    }
    print(json.dumps(result))
    if args.out:
        with args.out.open("a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
