"""Probe (exploration): does the *source's* observation pick the positions the target's tail reads?

The attended share (``recompute.most_attended``, until stop 53) ran the target's native tail over the translated
cache to find the positions a continuation will read; that pass costs ~0.05x of a prefill (a few
tokens through every layer read all the weights). The source model reads the whole context anyway,
once for every target and outside the translation's cost: the attention its own last tokens give
the rest of the context, mapped onto target tokens as the surprisal is (``Alignment.overlap_max``),
would be free at the target. Here it is computed after the source prefill with
``cache_ops.attention_to_cache`` on the source model (in serving it would be a hook in the prefill).

Per sample, on top of the shipped operating point (``op``), ``--extra`` of the context chosen by:
the target's tail over the raw translation (``tgt``, what ``most_attended`` read until stop 53), the source's
own tail (``src``), and at random (``rnd``: the control at the same cost); and ``srcB``, the
source's picks in place of the card's recent share (candidate B of the README, at the cost of
``op``: the card's fraction less its recent share by its selection, plus that share by ``src``). Retention and content
gain as ``../through-recompute/compare.py``; ``overlap``: the share of ``tgt``'s extra positions
that ``src`` picks too (the share a random pick would reach is ``--extra`` over what is not yet chosen).

    python reports/experiments/attended-recompute/free_observation.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 12 --seed 1031 --out gemma3/free-moby-dick.json
"""

import copy
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples, score_conditions  # noqa: E402
from probe import ATTENDED, attention_shares, probe_parser, report  # noqa: E402  (installs the ATTENDED hook)
from tokens import models_and_translator  # noqa: E402

from mot_core.cache_ops import attention_to_cache  # noqa: E402
from mot_core.translation.objective import PreparedSample, operating_point_cache  # noqa: E402


def source_shares(source, prepared: PreparedSample) -> torch.Tensor:
    """``[keep]``: what the source tokens of the target's native tail read of the source tokens
    before them, per target token (the largest over the source tokens it overlaps)."""
    alignment, cache = prepared.alignment, prepared.source_cache
    tail_start = alignment.target_spans[prepared.keep][0]
    first = next(i for i, (_, end) in enumerate(alignment.source_spans) if end > tail_start)
    before = replace(
        cache,
        keys=[k[:, :, :first] for k in cache.keys],
        values=[v[:, :, :first] for v in cache.values],
        token_ids=cache.token_ids[:, :first],
        surprisal=None,
        tail_attention=None,
    )
    read = attention_to_cache(source, before, cache.token_ids[:, first:])
    per_source = torch.cat((read, torch.zeros(cache.seq_len - first)))
    return alignment.overlap_max(per_source)[: prepared.keep]


def main() -> None:
    args = probe_parser(__doc__).parse_args()
    source, target, shipped = models_and_translator(args)
    without_recent = copy.deepcopy(shipped)
    without_recent.card.recompute_fraction -= shipped.card.recompute_recent
    without_recent.card.recompute_recent = 0.0
    overlaps: list[float] = []

    def conditions_of(p, other) -> dict:
        caches, chosen = {}, {}
        for suffix, q in (("", p), ("/deranged", other)):
            ATTENDED.clear()
            caches["op" + suffix] = operating_point_cache(shipped, q, target)
            shares = {
                "tgt": attention_shares(target, shipped, q),
                "src": source_shares(source, q),
                "rnd": torch.rand(q.keep, generator=torch.Generator().manual_seed(q.keep)),
            }
            for name, s in shares.items():
                ATTENDED.update(shares=s, extra=args.extra, chosen=[])
                caches[name + suffix] = operating_point_cache(shipped, q, target)
                if not suffix:
                    chosen[name] = set(ATTENDED["chosen"][0].tolist())
            ATTENDED.update(shares=shares["src"], extra=shipped.card.recompute_recent)
            caches["srcB" + suffix] = operating_point_cache(without_recent, q, target)
        ATTENDED.clear()
        overlaps.append(len(chosen["tgt"] & chosen["src"]) / max(1, len(chosen["tgt"])))
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, shipped.card.native_tail, conditions_of)
    per_sample = [round(o, 2) for o in overlaps]
    print(f"overlap of src with tgt: mean {statistics.mean(overlaps):.3f} (per sample {per_sample})")
    report(args, nll, ("op", "tgt", "src", "rnd", "srcB"), overlap=overlaps)


if __name__ == "__main__":
    main()
