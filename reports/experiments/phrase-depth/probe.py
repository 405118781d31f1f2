"""Do the recomputed names and numbers need every layer? At the card's operating point the target
recomputes its phrases (names and numbers, ranked by the source's surprisal) and the context's last
tokens through all its layers. A token's rows at layer ``l`` need only its hidden state below ``l``,
so a recompute can stop early: the phrases' lower layers become the target's own, the upper ones
stay translated, at ``k / L`` of the cost. If QA accuracy (which the phrases are there for) holds
with the phrases through the lower ``k`` layers, the saving would pay for recomputing other
positions (``../attended-recompute/``: what the context's end reads) at full depth.

Variants ``phrases@K``: the card's selection, the phrases recomputed through layers ``0..K-1`` only,
then position 0 and the recent share through every layer over that. (The card's own recompute,
``op``, runs them all in one pass; in one pass with two depths the recent tokens would read the
same rows as here: the phrases' fresh ones below ``K``, translated ones above.) Retention and
content gain as ``../through-recompute/compare.py``; with ``--qa``, QA accuracy on qa_dev items.

    python reports/experiments/phrase-depth/probe.py -t gemma3-270m --variants 12,9 \\
        --qa data/eval/qa_dev.jsonl --qa-items 100:200 --out gemma3/qa-100-199.json
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
import compare  # noqa: E402
from compare import parse_with_qa_mode, score_variants  # noqa: E402
from partial_depth import recompute_through  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.recompute as recompute  # noqa: E402

DEPTH: list[int] = []  # while set: the phrases' depth (layers) in the next blend
RECENT: list[float] = []  # the card's recent share (set in main)
_recompute_positions = recompute.recompute_positions
_operating_point_cache = compare.operating_point_cache


def _two_depths(target, cache, positions, grad=False):
    """The head and the recent share through every layer, the rest (the phrases) through ``DEPTH``."""
    if not DEPTH:
        return _recompute_positions(target, cache, positions, grad=grad)
    positions = positions.unique()
    recent = round(RECENT[0] * cache.seq_len)
    full = (positions == 0) | (positions >= cache.seq_len - recent)
    shallow = recompute_through(target, cache, positions[~full], DEPTH[0] - 1)
    return _recompute_positions(target, shallow, positions[full], grad=grad)


recompute.recompute_positions = _two_depths


def operating_point_cache(translator, prepared, target):
    DEPTH[:] = [translator.depth] if getattr(translator, "depth", None) else []
    try:
        return _operating_point_cache(translator, prepared, target)
    finally:
        DEPTH.clear()


compare.operating_point_cache = operating_point_cache


def main() -> None:
    parser = sample_parser(__doc__, needs_corpus=False)
    parser.add_argument("--variants", default="12,9", help="comma-separated depths (layers) for the phrases")
    args = parse_with_qa_mode(parser)
    source, target, shipped = models_and_translator(args)
    RECENT.append(shipped.card.operating_point.recent)
    translators = {"op": shipped}
    for depth in (int(d) for d in args.variants.split(",")):
        if not 0 < depth <= target.spec.num_layers:
            raise SystemExit(f"depth {depth} is not in 1..{target.spec.num_layers}")
        translators[f"phrases@{depth}"] = copy.deepcopy(shipped)
        translators[f"phrases@{depth}"].depth = depth
    result = score_variants(args, source, target, translators, shipped.card.native_tail)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
