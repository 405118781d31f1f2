"""Does the recompute say how far to trust the rest of the translated cache? After the card's
recompute, the target holds, for the recomputed positions, both the translated rows and its own.
Per layer and KV head, the least-squares slope of its own rows on the translated ones over those
positions, ``<k, k'> / <k', k'>``, is 1 for a calibrated translator (an MSE-trained prediction is
uncorrelated with its error) and below 1 where it is over-confident, as out of its training
register. The variants scale every other translated row by that slope, clamped to
[``--floor``, 1]: ``keys`` (a softer attention temperature over the translated positions,
``../attention-temperature/`` with the factor chosen per context instead of fixed), ``values``, or
``both``. Same cost as the card's operating point (a few multiply-adds per row). Retention and
content gain as ``../through-recompute/compare.py``; with ``--qa``, QA accuracy on qa_dev items.

    python reports/experiments/calibrated-rows/probe.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --out gemma3/wiki-style.json
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
import compare  # noqa: E402
from compare import parse_with_qa_mode, score_variants  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.translation.objective import translated_cache  # noqa: E402
from mot_core.translation.recompute import OperatingPoint, blend  # noqa: E402

VARIANTS = ("keys", "values", "both")
SLOPES: list[dict] = []  # per cache made by a variant: the slopes it applied, per layer (mean over heads)
_operating_point_cache = compare.operating_point_cache


def slopes(fresh: torch.Tensor, translated: torch.Tensor, floor: float) -> torch.Tensor:
    """``[1, H, 1, 1]``: per head, the slope of ``fresh`` on ``translated`` rows ``[1, H, n, D]``."""
    fresh, translated = fresh.float(), translated.float()
    slope = (fresh * translated).sum((2, 3)) / translated.pow(2).sum((2, 3)).clamp_min(1e-12)
    return slope.clamp(floor, 1.0)[..., None, None]


def calibrated_cache(translator, prepared, target):
    """The card's operating point, with the rows it did not recompute scaled as ``translator.calibrate`` says."""
    point = translator.card.operating_point
    raw = translated_cache(translator, prepared, target, OperatingPoint(0.0))  # every position, none recomputed
    blended = blend(target, raw, point)
    recomputed = (blended.keys[0] != raw.keys[0]).any(-1).any(1)[0]  # [T]
    kept = ~recomputed
    kept[0] = False  # the native head
    keys, values, applied = list(blended.keys), list(blended.values), {"keys": [], "values": []}
    for layer in range(blended.num_layers):
        for name, rows, fresh, old in (
            ("keys", keys, blended.keys[layer], raw.keys[layer]),
            ("values", values, blended.values[layer], raw.values[layer]),
        ):
            if translator.calibrate not in (name, "both"):
                continue
            slope = slopes(fresh[:, :, recomputed], old[:, :, recomputed], translator.floor)
            scaled = rows[layer].clone()
            scaled[:, :, kept] = (scaled[:, :, kept].float() * slope).to(scaled.dtype)
            rows[layer] = scaled
            applied[name].append(slope.mean().item())
    SLOPES.append(applied)
    return replace(blended, keys=keys, values=values)


def operating_point_cache(translator, prepared, target):
    if getattr(translator, "calibrate", None) is None:
        return _operating_point_cache(translator, prepared, target)
    return calibrated_cache(translator, prepared, target)


compare.operating_point_cache = operating_point_cache


def main() -> None:
    parser = sample_parser(__doc__, needs_corpus=False)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    parser.add_argument("--floor", type=float, default=0.5, help="the smallest slope applied")
    args = parse_with_qa_mode(parser)
    source, target, shipped = models_and_translator(args)
    translators = {"op": shipped}
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: one of {VARIANTS}")
        translators[name] = copy.deepcopy(shipped)
        translators[name].calibrate, translators[name].floor = name, args.floor
    result = score_variants(args, source, target, translators, shipped.card.native_tail)
    layers = {
        part: [sum(s[part][i] for s in SLOPES if s[part]) / max(1, sum(1 for s in SLOPES if s[part])) for i in range(n)]
        for part in ("keys", "values")
        if (n := max((len(s[part]) for s in SLOPES), default=0))
    }
    print("mean slope per layer:", {part: [round(x, 3) for x in v] for part, v in layers.items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result | {"mean_slopes": layers}, indent=1))


if __name__ == "__main__":
    main()
