"""Oracle: on top of the operating point, recompute natively every context token of a class
(``tokens.klass``; by default the spaced punctuation of tokenised text). Not a knob (it costs
what the class's share of the context costs): it says whether the class's own rows are what is lost.

    python reports/experiments/attended-recompute/oracle.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --samples 12 --seed 1031
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parent))
from compare import content_scores, corpus_samples, score_conditions  # noqa: E402
from tokens import klass, models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.recompute as recompute  # noqa: E402
from mot_core.translation.objective import operating_point_cache  # noqa: E402

EXTRA: list[torch.Tensor] = []  # while set: positions recomputed on top of the operating point's
_recompute_positions = recompute.recompute_positions


def _with_extra(target, cache, positions, grad=False):
    if EXTRA:
        positions = torch.unique(torch.cat((positions, EXTRA[0])))
    return _recompute_positions(target, cache, positions, grad=grad)


recompute.recompute_positions = _with_extra


def main() -> None:
    parser = sample_parser(__doc__)
    parser.add_argument("--classes", default="sp+punct", help="comma-separated tokens.klass names")
    args = parser.parse_args()
    source, target, translator = models_and_translator(args)
    classes, shares = args.classes.split(","), []

    def of_class(p) -> torch.Tensor:
        pieces = target.tokenizer.batch_decode([[t] for t in p.target_ids[0, : p.keep].tolist()])
        positions = [i for i, piece in enumerate(pieces) if i > 0 and klass(piece) in classes]
        shares.append(len(positions) / len(pieces))
        return torch.tensor(positions, dtype=torch.long)

    def conditions_of(p, other) -> dict:
        caches = {}
        for suffix, q in (("", p), ("/deranged", other)):
            EXTRA.clear()
            caches["op" + suffix] = operating_point_cache(translator, q, target)
            EXTRA.append(of_class(q))
            caches["oracle" + suffix] = operating_point_cache(translator, q, target)
        EXTRA.clear()
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, translator.card.native_tail, conditions_of)
    for name in ("op", "oracle"):
        s = content_scores(nll, name)
        print(
            f"{name:8} retention {s['retention']:.3f} deranged {s['deranged']:.3f} content gain {s['content_gain']:.3f}"
        )
    print(f"extra tokens: {sum(shares) / len(shares):.3f} of the context")


if __name__ == "__main__":
    main()
