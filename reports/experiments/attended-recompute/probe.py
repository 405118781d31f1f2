"""Probe (exploration, before ``mot_core`` had it): recompute what the context's native tail reads.

Per sample, the shipped operating point (``op``), 3% more by the card's own selection (``more``),
``op`` plus 3% chosen by the attention of the native tail over the raw translated cache (``attn``),
and the same 3% taken out of the phrase budget (``swap``, the cost of ``op``). The attention is
read with the model's eager implementation (``mot_core.cache_ops.attention_to_cache`` later
computes the same shares from each attention module's own projections; its test checks them
against eager attention). Retention and content gain as ``../through-recompute/compare.py``.

    python reports/experiments/attended-recompute/probe.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 12 --seed 1031 --out gemma3/probe-moby-dick.json
"""

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import content_scores, corpus_samples, score_conditions  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.recompute as recompute  # noqa: E402
from mot_core.cache_ops import to_model_cache  # noqa: E402
from mot_core.translation.objective import operating_point_cache, translated_cache  # noqa: E402

ATTENDED: dict = {}  # while set: "shares" [T] and "extra" (a share of the context) to add by attention
# (and, if it holds a list "chosen", each call's added positions are appended to it)
_recompute_positions = recompute.recompute_positions


def _with_attended(target, cache, positions, grad=False):
    """``recompute_positions`` with the ``ATTENDED`` extra positions (most read, not yet chosen) added."""
    if ATTENDED:
        shares = ATTENDED["shares"].clone()
        shares[positions], shares[0] = -1.0, -1.0
        chosen = shares.topk(round(ATTENDED["extra"] * cache.seq_len)).indices
        ATTENDED.get("chosen", []).append(chosen)
        positions = torch.unique(torch.cat((positions, chosen)))
    return _recompute_positions(target, cache, positions, grad=grad)


recompute.recompute_positions = _with_attended


@torch.no_grad()
def attention_shares(target, translator, prepared) -> torch.Tensor:
    """``[keep]``: per layer, each cached position's share of what the native tail reads (over the
    raw translation), summed over layers."""
    model_cache = to_model_cache(target, translated_cache(translator, prepared, target, recompute.OperatingPoint(0.0)))
    implementation = target.model.config._attn_implementation
    target.model.set_attn_implementation("eager")
    try:
        tail = prepared.tail_ids.to(target.device)
        attentions = target.model(input_ids=tail, cache=model_cache, use_cache=True, output_attentions=True).attentions
    finally:
        target.model.set_attn_implementation(implementation)
    keep, shares = prepared.keep, torch.zeros(prepared.keep)
    for weights in attentions:  # [1, H, q, kept + q]; sliding layers keep only their window
        kept = weights.shape[-1] - weights.shape[-2]
        read = weights[0, :, :, :kept].float().sum((0, 1))
        shares[keep - kept :] += read / (read[1:] if kept == keep else read).sum().clamp_min(1e-9)
    return shares


def probe_parser(doc: str) -> argparse.ArgumentParser:
    """``sample_parser`` with the options the attended-share probes add: ``--extra`` and ``--out``."""
    parser = sample_parser(doc)
    parser.add_argument("--extra", type=float, default=0.03, help="share of the context recomputed on top")
    parser.add_argument("--out", type=Path, help="write the scores here as JSON")
    return parser


def main() -> None:
    args = probe_parser(__doc__).parse_args()
    source, target, shipped = models_and_translator(args)
    more, swap = copy.deepcopy(shipped), copy.deepcopy(shipped)
    more.card.recompute_fraction += args.extra
    swap.card.recompute_fraction -= args.extra

    def conditions_of(p, other) -> dict:
        caches = {}
        for suffix, q in (("", p), ("/deranged", other)):
            ATTENDED.clear()
            caches["op" + suffix] = operating_point_cache(shipped, q, target)
            caches["more" + suffix] = operating_point_cache(more, q, target)
            ATTENDED.update(shares=attention_shares(target, shipped, q), extra=args.extra)
            caches["attn" + suffix] = operating_point_cache(shipped, q, target)
            caches["swap" + suffix] = operating_point_cache(swap, q, target)
        ATTENDED.clear()
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, shipped.card.native_tail, conditions_of)
    report(args, nll, ("op", "more", "attn", "swap"))


def report(args: argparse.Namespace, nll: dict, names, **extra) -> None:
    """Print retention, control and content gain of each condition in ``names``; with ``--out``, write
    them as JSON with the options, the mean NLLs and ``extra``."""
    scores = {name: content_scores(nll, name) for name in names}
    for name, s in scores.items():
        print(f"{name:8} retention {s['retention']:.3f} deranged {s['deranged']:.3f}", end=" ")
        print(f"content gain {s['content_gain']:.3f}")
    if args.out:
        settings = {k: str(v) for k, v in vars(args).items()}
        args.out.write_text(json.dumps({"args": settings, "nll": nll, **scores, **extra}, indent=1))


if __name__ == "__main__":
    main()
