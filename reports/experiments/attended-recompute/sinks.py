"""Probe (exploration): the context's first tokens recomputed too (attention sinks).

The target always computes position 0 itself (``cache_ops.replace_head``); models lean on their
first few tokens as attention sinks (StreamingLLM, Xiao et al., 2023, keeps 4), and translated rows
there are read by every later token. Per sample, on top of the shipped operating point (``op``),
positions ``1..k-1`` recomputed as well (``first<k>``, for each ``--first``): a few tokens, a few
thousandths of the recompute's cost. Retention and content gain as ``../through-recompute/compare.py``.

    python reports/experiments/attended-recompute/sinks.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 12 --seed 1031
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples, score_conditions  # noqa: E402
from probe import ATTENDED, report  # noqa: E402  (installs the ATTENDED hook)
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.translation.objective import operating_point_cache  # noqa: E402


def main() -> None:
    parser = sample_parser(__doc__)
    parser.add_argument("--first", default="4,16", help="comma-separated k: positions 1..k-1 recomputed on top")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    firsts = [int(k) for k in args.first.split(",")]
    source, target, shipped = models_and_translator(args)

    def conditions_of(p, other) -> dict:
        caches = {}
        for suffix, q in (("", p), ("/deranged", other)):
            ATTENDED.clear()
            caches["op" + suffix] = operating_point_cache(shipped, q, target)
            for k in firsts:
                # below the hook's -1 for positions already chosen: those of 1..k-1 are taken again
                # (and deduplicated), never a position after k
                shares = torch.full((q.keep,), -2.0)
                shares[1:k] = torch.arange(k - 1, 0, -1, dtype=torch.float32)
                ATTENDED.update(shares=shares, extra=(k - 1) / q.keep)
                caches[f"first{k}" + suffix] = operating_point_cache(shipped, q, target)
        ATTENDED.clear()
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, shipped.card.native_tail, conditions_of)
    report(args, nll, ["op"] + [f"first{k}" for k in firsts])


if __name__ == "__main__":
    main()
