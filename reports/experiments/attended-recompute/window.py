"""Probe (stop 54): how many of the context's last tokens should the source observe?

The attended share (``recompute_attended``) recomputes the positions the source's last
``cache_ops.OBSERVED_TOKENS`` (4) tokens read most in its prefill. Four queries are a small sample
of what a 64-token continuation will read; SnapKV observes 16-64. Per sample, the shipped operating
point (``op``) and, on top of it, ``--extra`` of the context chosen by the source's observation
over its last W tokens (``wW`` for each ``--windows`` W), the same translator and budget, only the
window differs. Retention and content gain as ``../through-recompute/compare.py``; ``overlap``:
the share of the first window's top positions (before the card's own picks are set aside) that
each window picks too.

    python reports/experiments/attended-recompute/window.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 40 --seed 1031 --out gemma3/window-moby-dick.json
"""

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples, score_conditions  # noqa: E402
from probe import probe_parser, report  # noqa: E402
from tokens import models_and_translator  # noqa: E402

import mot_core.cache_ops as cache_ops  # noqa: E402
from mot_core.translation.objective import PreparedSample, operating_point_cache, translated_cache  # noqa: E402
from mot_core.translation.recompute import most_attended  # noqa: E402


def observed_by(source, prepared: PreparedSample, window: int) -> PreparedSample:
    """``prepared`` with the source's notes from a prefill that observes its last ``window`` tokens
    (``prepare`` already ran the one that observes the default count)."""
    default = cache_ops.OBSERVED_TOKENS
    if window == default:
        return prepared
    cache_ops.OBSERVED_TOKENS = window
    try:
        source_cache, _ = cache_ops.prefill(source, prepared.alignment.source_ids, for_targets=True)
    finally:
        cache_ops.OBSERVED_TOKENS = default
    return replace(prepared, source_cache=source_cache)


def main() -> None:
    parser = probe_parser(__doc__)
    parser.add_argument("--windows", default="4,16,64", help="observation windows, comma-separated")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    source, target, shipped = models_and_translator(args)
    shipped_point = shipped.card.operating_point
    attended = replace(shipped_point, fraction=shipped_point.fraction + args.extra, attended=args.extra)
    overlaps: dict[int, list[float]] = {w: [] for w in windows}

    def conditions_of(p, other) -> dict:
        caches, picks = {}, {}
        for suffix, q in (("", p), ("/deranged", other)):
            caches["op" + suffix] = operating_point_cache(shipped, q, target)
            for w in windows:
                observed = observed_by(source, q, w)
                caches[f"w{w}" + suffix] = translated_cache(shipped, observed, target, attended)
                if not suffix:
                    count = round(args.extra * q.keep)
                    picks[w] = set(
                        most_attended(
                            observed.notes["tail_attention"][: q.keep], count, taken=torch.zeros(0, dtype=torch.long)
                        ).tolist()
                    )
        for w in windows:
            overlaps[w].append(len(picks[w] & picks[windows[0]]) / max(1, len(picks[windows[0]])))
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, shipped.card.native_tail, conditions_of)
    overlap = {w: statistics.mean(o) for w, o in overlaps.items()}
    print("overlap with the first window's picks:", {w: round(o, 3) for w, o in overlap.items()}, flush=True)
    report(args, nll, ("op", *(f"w{w}" for w in windows)), overlap=overlap)


if __name__ == "__main__":
    main()
