"""Is the shift out of register a shift of the source rows' statistics, which the context itself
shows? The shipped translator standardises its inputs by its training set's mean and standard
deviation per source layer and column; the variants use this context's own instead: ``ctxmean``
(its mean), ``ctxmean:A`` (a share ``A`` of the way from the training mean to its mean),
``ctxstd`` (its mean and standard deviation). No training; the operating point is the card's.
Retention and content gain as ``../through-recompute/compare.py``.

    python reports/experiments/token-coverage/context_standardisation.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --out gemma3/context-standardisation-wiki-style.json
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import score_variants  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402


def standardised_by_context(shipped, name: str):
    """A copy of ``shipped`` whose input statistics come (partly) from each context, as ``name`` says."""
    translator = copy.deepcopy(shipped)
    kind, _, share = name.partition(":")
    if kind not in ("ctxmean", "ctxstd"):
        raise SystemExit(f"unknown variant {name!r}: ctxmean[:A] or ctxstd[:A]")
    share = float(share or 1.0)
    standardise = translator._standardised_layer_major

    def by_context(aligned):
        mean, std = translator.source_mean.clone(), translator.source_std.clone()
        rows = aligned.float()
        try:
            translator.source_mean.lerp_(rows.mean(0), share)
            if kind == "ctxstd":
                translator.source_std.mul_((rows.std(0).clamp_min(1e-4) / std) ** share)
            return standardise(aligned)
        finally:
            translator.source_mean.copy_(mean)
            translator.source_std.copy_(std)

    translator._standardised_layer_major = by_context
    return translator


def main() -> None:
    parser = sample_parser(__doc__)
    parser.add_argument("--variants", default="ctxmean,ctxmean:0.5,ctxstd")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target, shipped = models_and_translator(args)
    translators = {"op": shipped} | {v: standardised_by_context(shipped, v) for v in args.variants.split(",")}
    result = score_variants(args, source, target, translators, shipped.card.native_tail)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
