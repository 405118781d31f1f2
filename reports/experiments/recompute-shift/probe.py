"""Does the recompute tell us how the translation is off on this text? A per-context mean shift.

At the operating point the target recomputes ~13% of the context itself, so for those tokens it
holds both the translated row and its own. Out of the training register the translation breaks
(`../copying/`: on news text the sliding layers' *values*), and a register shift may be largely a
shift of each layer's mean. This probe estimates, per context, layer and column, the mean of
(recomputed - translated) over the recomputed tokens and adds it to every other token's
translated row: values only, or keys (pre-RoPE) and values. No training, a few additions.

    python reports/experiments/recompute-shift/probe.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 20 --seed 1031 --out moby.json

Scores NLL retention and content gain as ``compare.py`` does (same samples, same controls).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from mot_core.cache_ops import rerotate, unrotate
from mot_core.kv_cache import KVCache
from mot_core.loading import load_model
from mot_core.translation.objective import translated_cache
from mot_core.translation.recompute import OperatingPoint, blend
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import content_scores, corpus_samples, score_conditions  # noqa: E402

SHIFTS = {"shift_v": (False, 1.0), "shift_kv": (True, 1.0), "shift_v_half": (False, 0.5)}  # (keys too, share)
VARIANTS = ("op", *SHIFTS)


def shifted(blended: KVCache, translated: KVCache, spec, recomputed: torch.Tensor, keys: bool, shrink: float):
    """``blended`` with the mean residual of the recomputed positions added to the others."""
    plain_b, plain_t = unrotate(blended, spec), unrotate(translated, spec)
    new_keys, new_values = list(plain_b.keys), list(plain_b.values)
    others = ~recomputed
    for layer in range(blended.num_layers):
        pairs = [("v", new_values, plain_t.values)] + ([("k", new_keys, plain_t.keys)] if keys else [])
        for _, out, before in pairs:
            fresh = out[layer]
            delta = (fresh[:, :, recomputed] - before[layer][:, :, recomputed]).mean(2, keepdim=True) * shrink
            moved = fresh.clone()
            moved[:, :, others] = fresh[:, :, others] + delta
            moved[:, :, 0] = fresh[:, :, 0]  # the native head stays
            out[layer] = moved
    return rerotate(replace(plain_b, keys=new_keys, values=new_values), spec)


def caches(translator, target, p, selection_recent_only: bool):
    card = translator.card
    translated = translated_cache(translator, p, target, OperatingPoint(0.0))  # every position, nothing recomputed
    blended = blend(target, translated, card.operating_point)
    recomputed = (blended.values[0][0] != translated.values[0][0]).any(-1).any(0)  # [T]
    recomputed[0] = False
    if selection_recent_only:
        tail = round(card.recompute_recent * p.keep)
        recomputed[: p.keep - tail] = False
    out = {"op": blended}
    for name, (keys, shrink) in SHIFTS.items():
        out[name] = shifted(blended, translated, target.spec, recomputed, keys, shrink)
    return out


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--checkpoint", help="default: the shipped translator")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1031)
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--recent-only", action="store_true", help="estimate the shift from the recent tail only")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target = load_model(args.source), load_model(args.target)
    translator = load_translator(args.checkpoint or resolve_translator_path(f"{source.name}__{target.name}"))
    samples = corpus_samples(args, source.tokenizer)

    def conditions_of(p, other) -> dict:
        ours = caches(translator, target, p, args.recent_only)
        theirs = caches(translator, target, other, args.recent_only)
        return ours | {f"{name}/deranged": cache for name, cache in theirs.items()}

    nll = score_conditions(source, target, samples, translator.card.native_tail, conditions_of)
    result = {"corpus": str(args.corpus), "samples": len(samples), "seed": args.seed, "nll": nll}
    for name in VARIANTS:
        result[name] = content_scores(nll, name)
        print(
            f"{name:>14}  retention {result[name]['retention']:.3f}  content gain {result[name]['content_gain']:.3f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
