"""Knock-out variants of a shipped translator, written as checkpoints for ``compare.py`` to score
side by side with it (same samples, controls and operating point).

Why: the translator's design has parts no report has measured on their own: the mixture of MLP
experts with its top-2 router, and (Qwen2.5) the mixtures over source layers beyond the first.
A knock-out says what a trained part contributes to the translator it was trained in (not what a
translator trained without it would reach). The expert path is also the translator's only
non-linear part, the one most able to fit its training register; if it is what fails out of
register, the knock-out shows it there first.

Variants (``--variants``, comma-separated):
``experts-off`` (the experts' output map zeroed: the linear map alone), ``top1`` (the router's
best expert only, its gate 1), ``dense`` (all experts, softmax gates over all of them), ``mixes1``
(only the first mixture feeds the linear map; the shipped Gemma-3 has only that one).

    python reports/experiments/experts/variants.py -t gemma3-270m --variants experts-off,top1,dense \
        --out /tmp/experts
    python reports/experiments/through-recompute/compare.py -t gemma3-270m \
        --new /tmp/experts/experts-off /tmp/experts/top1 /tmp/experts/dense \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 20 --seed 1031 --out moby-dick.json
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from mot_core.translation.mixture import MixtureTranslator
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path

VARIANTS = ("experts-off", "top1", "dense", "mixes1")


def knocked_out(shipped: MixtureTranslator, name: str) -> MixtureTranslator:
    """A copy of ``shipped`` with ``name``'s part knocked out."""
    if name in ("top1", "dense"):  # the router's k only (what `mot translator set --top-k` saves)
        translator = shipped.with_top_k(1 if name == "top1" else shipped.experts)
    else:
        translator = copy.deepcopy(shipped)
        # the training-time validation was measured on the parent, not on this variant
        translator.card.metrics = {"parent": translator.card.metrics}
        with torch.no_grad():
            if name == "experts-off":
                translator.w_out.zero_()
            elif name == "mixes1":
                if translator.mixes == 1:
                    raise SystemExit("the translator has one mixture per target layer: nothing to knock out")
                translator.base[:, 1:] = 0
            else:
                raise SystemExit(f"unknown variant {name!r}; choose from {VARIANTS}")
    translator.card.recipe["knocked_out"] = {"from": shipped.card.version, "part": name}
    return translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--checkpoint", type=Path, help="default: the shipped translator of the pair")
    parser.add_argument("--variants", default=",".join(VARIANTS[:3]))
    parser.add_argument("--out", type=Path, required=True, help="one checkpoint directory per variant under it")
    parser.add_argument("--int8", action="store_true", help="save int8 matrices, as the shipped translators are")
    args = parser.parse_args()
    directory = args.checkpoint or resolve_translator_path(f"{args.source}__{args.target}")
    shipped = load_translator(directory)
    if not isinstance(shipped, MixtureTranslator):
        raise SystemExit(f"{directory} is a {shipped.kind} translator; knock-outs need a mixture")
    for name in args.variants.split(","):
        translator = knocked_out(shipped, name)
        # either way it computes exactly what the shipped translator computes, but for the part
        # knocked out: the shipped int8 weights are already rounded into the module, and int8 of
        # them gives back the same values (float32 loads faster; int8 is what would ship)
        saved = translator.save(args.out / name, dtype=torch.int8 if args.int8 else torch.float32)
        print(f"{name:>12}  {saved}  {translator.card.version}")


if __name__ == "__main__":
    main()
