"""Should the recompute spend its phrase budget on the tokens the training corpus (almost) never
had? The shipped operating point (``op``) beside the same point where target tokens seen fewer
than ``--min-count`` times in the translator's training corpora (``coverage.py``) compete for the
phrase budget like words (punctuation included, which ``phrases`` otherwise ranks last) with
``BONUS`` nats added to their surprisal (``rare+BONUS``). Same cost: the fraction and the recent
share are the card's. Retention and content gain as ``../through-recompute/compare.py``; with
``--qa``, QA accuracy on qa_dev items ``--qa-items`` instead.

    python reports/experiments/token-coverage/rare_recompute.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --out gemma3/rare-recompute-wiki-style.json
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
import compare  # noqa: E402
from compare import corpus_samples, parse_with_qa_mode, score_variants  # noqa: E402
from coverage import token_counts, training_corpora  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.recompute as recompute  # noqa: E402

RARE: dict = {}  # while a rare+ variant's cache is made: "bonus", "rare" [V] and that context's "mask" [T]
_operating_point_cache, _phrase_index, _select_positions = (
    compare.operating_point_cache,
    recompute.phrase_index,
    recompute.select_positions,
)


def operating_point_cache(translator, prepared, target):
    RARE["bonus"] = getattr(translator, "rare_bonus", None)
    try:
        return _operating_point_cache(translator, prepared, target)
    finally:
        RARE["bonus"] = None


def phrase_index(tokenizer, token_ids):
    """``recompute.phrase_index``, with the rare tokens counted as words (so not ranked last)."""
    phrases, alphanumeric, name_like = _phrase_index(tokenizer, token_ids)
    if RARE.get("bonus") is not None:
        RARE["mask"] = RARE["rare"][token_ids.long()]
        alphanumeric = alphanumeric | RARE["mask"]
    return phrases, alphanumeric, name_like


def select_positions(scores, fraction, **kwargs):
    if RARE.get("bonus") is not None:
        scores = scores + RARE["bonus"] * RARE["mask"].to(scores.dtype)
    return _select_positions(scores, fraction, **kwargs)


compare.operating_point_cache = operating_point_cache
recompute.phrase_index, recompute.select_positions = phrase_index, select_positions


def main() -> None:
    parser = sample_parser(__doc__, needs_corpus=False)
    parser.add_argument("--min-count", type=int, default=10, help="rarer than this in the training corpora")
    parser.add_argument("--bonuses", default="3,1", help="comma-separated surprisal bonuses (nats), one variant each")
    args = parse_with_qa_mode(parser)
    source, target, shipped = models_and_translator(args)
    RARE["rare"] = token_counts(target.tokenizer, training_corpora(target.name)) < args.min_count
    translators = {"op": shipped}
    for bonus in args.bonuses.split(","):
        translators[f"rare+{bonus}"] = copy.deepcopy(shipped)
        translators[f"rare+{bonus}"].rare_bonus = float(bonus)
    result, samples = {}, None
    if not args.qa:
        encode = target.tokenizer
        samples = corpus_samples(args, source.tokenizer)
        ids = torch.cat([torch.tensor(encode(s.context, add_special_tokens=False).input_ids) for s in samples])
        result["rare_share"] = RARE["rare"][ids].float().mean().item()
        print(f"share of the contexts' target tokens seen < {args.min_count} times: {result['rare_share']:.3f}")
    result |= score_variants(args, source, target, translators, shipped.card.native_tail, samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
