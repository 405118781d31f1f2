"""Where a translation's time goes: each step of ``CacheTranslator.translate`` and the recompute
on one sample, median of ``--repeats`` runs each, as a share of the target's native prefill (the
allocator tuned as the CLI tunes it).

    python reports/experiments/serving-cost/parts.py -t gemma3-270m
"""

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.alignment import align  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.benchmarks import median_seconds  # noqa: E402
from mot_core.cache_ops import prefill  # noqa: E402
from mot_core.translation.assemble import rows_to_cache  # noqa: E402
from mot_core.translation.features import align_rows, kv_rows  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.recompute import blend  # noqa: E402
from mot_core.translation.translator import TranslationResult  # noqa: E402


def one_sample(description: str) -> tuple:
    """``--repeats`` and the options of ``sample_parser`` (one validation sample by default), the
    allocator tuned as the CLI tunes it, and what the scripts here time: the arguments, the models,
    the translator, the sample and its ``PreparedSample``, and a ``translate()`` of it with every
    position kept (what a recompute starts from)."""
    parser = sample_parser(description, samples=1, seed=7, corpus=VALIDATION)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    sample = corpus_samples(args, source.tokenizer)[0]
    prepared = prepare(source, target, sample, 64, translator.card.native_tail)

    translate = translating(source, target, translator, prepared, sample.context)
    return args, source, target, translator, sample, prepared, translate


def translating(source, target, translator, prepared, context: str) -> Callable[[], TranslationResult]:
    """``translate()`` of ``prepared`` (of ``context``) with every position kept (what a recompute starts from)."""

    def translate() -> TranslationResult:
        return translator.translate(
            prepared.source_cache,
            context,
            source_spec=source.spec,
            source_tokenizer=source.tokenizer,
            target_spec=target.spec,
            target_tokenizer=target.tokenizer,
            target_first_layer=target,
            all_positions=True,
        )

    return translate


@torch.no_grad()
def main() -> None:
    args, source, target, translator, sample, prepared, translate = one_sample(__doc__)
    card = translator.card
    ids = prepared.target_ids[:, : prepared.keep]
    source_cache = prepared.source_cache

    def timed(step) -> float:
        return median_seconds(step, args.repeats)

    def recompute(cache):
        return blend(target, cache, card.operating_point)

    rows = kv_rows(source_cache, source.spec)
    aligned = align_rows(rows, prepared.alignment.to_sparse())[: prepared.keep]
    predicted = translator.inference_rows(aligned, all_positions=True)
    cache = translate().cache  # blend recomputes the head (position 0) in its pass
    native = timed(lambda: prefill(target, ids))
    parts = {
        "align": timed(lambda: align(source.tokenizer, target.tokenizer, sample.context, causal=True)),
        "kv_rows": timed(lambda: kv_rows(source_cache, source.spec)),
        "align_rows": timed(lambda: align_rows(rows, prepared.alignment.to_sparse())),
        "predict_rows": timed(lambda: translator.inference_rows(aligned, all_positions=True)),
        "rows_to_cache": timed(lambda: rows_to_cache(predicted, target.spec, ids, "", all_positions=True)),
        "translate (all of the above)": timed(translate),
        "recompute (blend, the head included)": timed(lambda: recompute(cache)),
    }
    print(f"{target.name}: native prefill {native:.3f} s")
    for name, seconds in parts.items():
        print(f"  {name:38s} {seconds:7.4f} s  {seconds / native:.4f}x")


if __name__ == "__main__":
    main()
