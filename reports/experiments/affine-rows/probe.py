"""Does the recompute say how to correct the rest of the translated cache? A step past
``../calibrated-rows/`` (one slope per layer and head): after the card's recompute the target holds,
for the recomputed positions, both the translated rows and its own. Per layer and KV head, a ridge
regression of the correction on the translated rows over those positions (pre-RoPE keys, values),
``delta = (X'X + lam I)^-1 X'(Y - X)`` with ``lam = alpha * tr(X'X) / D``, shrunk towards no
correction, and every other translated row moves by ``x @ delta``. The slope is the special case
``delta = (s - 1) I``; the recompute's mean shift (``../recompute-shift/``) the rank-0 one. Same cost
as the card's operating point plus a D x D solve per layer and head. Variants: ``both@A`` (keys and
values, alpha A), ``keys@A``, ``values@A``.

    python reports/experiments/affine-rows/probe.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 12 --seed 1031 --out gemma3/moby-dick.json
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

from mot_core.cache_ops import rerotate, unrotate  # noqa: E402
from mot_core.translation.objective import translated_cache  # noqa: E402
from mot_core.translation.recompute import OperatingPoint, blend  # noqa: E402

PARTS = ("keys", "values", "both")
# per variant, per cache it made: relative error on held-out recomputed rows, before/after
FIT_ERRORS: dict[str, list[dict]] = {}
_operating_point_cache = compare.operating_point_cache


def ridge_delta(translated: torch.Tensor, fresh: torch.Tensor, alpha: float) -> torch.Tensor:
    """``[H, D, D]``: per head, the ridge map from translated rows ``[H, n, D]`` to their correction."""
    x, y = translated.double(), fresh.double()
    gram = x.transpose(1, 2) @ x  # [H, D, D]
    lam = alpha * gram.diagonal(dim1=1, dim2=2).sum(-1) / x.shape[-1]  # [H]
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return torch.linalg.solve(gram + lam[:, None, None] * eye, x.transpose(1, 2) @ (y - x))


def corrected_cache(translator, prepared, target):
    """The card's operating point, with the rows it did not recompute moved by a per-context ridge map."""
    point, spec = translator.card.operating_point, target.spec
    raw = unrotate(translated_cache(translator, prepared, target, OperatingPoint(0.0)), spec)
    blended = unrotate(blend(target, rerotate(raw, spec), point), spec)
    recomputed = (blended.values[0] != raw.values[0]).any(-1).any(1)[0]  # [T]
    fit = recomputed.clone()
    fit[0] = False  # the native head, an attention sink unlike any other row
    kept = ~recomputed
    parts = {"keys": list(blended.keys), "values": list(blended.values)}
    errors = {"before": [], "after": []}
    for name in ("keys", "values"):
        if translator.part not in (name, "both"):
            continue
        rows = parts[name]
        for layer in range(blended.num_layers):
            old, fresh = getattr(raw, name)[layer][0].float(), rows[layer][0].float()  # [H, T, D]
            delta = ridge_delta(old[:, fit], fresh[:, fit], translator.alpha)
            # out of sample: fitted on every other recomputed position, scored on the rest
            even, odd = fit.nonzero()[:, 0][::2], fit.nonzero()[:, 0][1::2]
            half = ridge_delta(old[:, even], fresh[:, even], translator.alpha)
            fitted = old[:, odd] + (old[:, odd].double() @ half).float()
            norm = fresh[:, odd].pow(2).sum()
            errors["before"].append(((old[:, odd] - fresh[:, odd]).pow(2).sum() / norm).item())
            errors["after"].append(((fitted - fresh[:, odd]).pow(2).sum() / norm).item())
            moved = rows[layer].clone()
            x = old[:, kept]
            moved[0][:, kept] = (x + (x.double() @ delta).float()).to(moved.dtype)
            rows[layer] = moved
    FIT_ERRORS.setdefault(translator.name, []).append(errors)
    return rerotate(replace(blended, keys=parts["keys"], values=parts["values"]), spec)


def operating_point_cache(translator, prepared, target):
    if getattr(translator, "part", None) is None:
        return _operating_point_cache(translator, prepared, target)
    return corrected_cache(translator, prepared, target)


compare.operating_point_cache = operating_point_cache


def main() -> None:
    parser = sample_parser(__doc__, needs_corpus=False)
    parser.add_argument("--variants", default="both@10,both@100,both@1000", help="comma-separated PART@ALPHA")
    args = parse_with_qa_mode(parser)
    source, target, shipped = models_and_translator(args)
    translators = {"op": shipped}
    for name in args.variants.split(","):
        part, alpha = name.split("@")
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}: one of {PARTS}")
        translators[name] = copy.deepcopy(shipped)
        translators[name].part, translators[name].alpha, translators[name].name = part, float(alpha), name
    result = score_variants(args, source, target, translators, shipped.card.native_tail)
    fit = {
        name: {k: sum(sum(e[k]) / len(e[k]) for e in caches) / len(caches) for k in ("before", "after")}
        for name, caches in FIT_ERRORS.items()
    }
    print("relative error on held-out recomputed rows (fitted on the others), mean over layers and caches:")
    for name, errors in fit.items():
        print(f"  {name:>10} {errors['before']:.3f} -> {errors['after']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result | {"fit_error": fit}, indent=1))


if __name__ == "__main__":
    main()
