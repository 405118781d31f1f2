"""Is the translated cache's damage out of register a matter of attention sharpness, or of how
much the target recomputes? Inference-only variants of the shipped translator, side by side.

Out of its training register a translated context of *another* passage (the ``deranged`` control)
makes the target worse than no context at all (Gemma-3 on the Wikipedia-style text: retention
-0.24, where its own prefill of that passage gives +0.28). Gemma-3 normalises every key (k_norm),
so a native key's norm hardly varies (5-18% across tokens), while the MSE-trained prediction is
shrunk toward the mean by about its cosine with the native key (0.8-0.97). Scaling the
translated keys by ``s`` scales each query's logits over the translated tokens: ``s < 1`` spreads
attention over them (and leaves more to the native head and the recomputed tokens), ``s > 1``
sharpens it. The recomputed tokens and position 0 stay the target's own.

Variants (``--variants``, comma-separated): ``keys:S`` (every layer), ``keys-global:S`` (full
attention layers only), ``keys-sliding:S`` (sliding-window layers only), ``values:S`` (every
layer's values: less of what the translated tokens say, attention unchanged), ``fraction:F`` (the card's
operating point with recompute fraction F; its selection and recent share kept). ``op`` (the card
as shipped) is always scored. Retention and content gain as ``compare.py`` (same samples, controls).

    python reports/experiments/attention-temperature/probe.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --samples 12 --seed 7 \
        --variants keys:0.9,keys:0.8,keys-global:0.8 --out gemma3/wiki-style.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

from mot_core.loading import load_model
from mot_core.translation.features import key_columns
from mot_core.translation.translator import CacheTranslator, load_translator
from services.engines import resolve_translator_path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import _portable, compare_nll, corpus_samples  # noqa: E402

LAYER_GROUPS = ("keys", "keys-global", "keys-sliding", "values")


def with_scale(translator: CacheTranslator, spec, group: str, scale: float) -> CacheTranslator:
    """The translator with its predicted pre-RoPE keys of ``group``'s layers multiplied by ``scale``
    (``values``: every layer's values instead)."""
    columns = ~key_columns(spec) if group == "values" else key_columns(spec)
    chosen = [
        group in ("keys", "values") or (group == "keys-global") == (window is None) for window in spec.sliding_windows
    ]
    factors = torch.tensor([scale if c else 1.0 for c in chosen])[:, None]  # [L, 1]
    predict = translator.predict_rows

    def predict_rows(aligned, *, all_positions=False, first_layer=None):
        rows = predict(aligned, all_positions=all_positions, first_layer=first_layer).clone()
        rows[:, :, columns] *= factors.to(rows.dtype)
        return rows

    translator.predict_rows = predict_rows
    return translator


def variant(shipped: CacheTranslator, spec, name: str) -> CacheTranslator:
    """A copy of ``shipped`` changed as ``name`` says."""
    translator = copy.deepcopy(shipped)
    kind, _, value = name.partition(":")
    if kind == "fraction":
        translator.card.recompute_fraction = float(value)
    elif kind in LAYER_GROUPS:
        with_scale(translator, spec, kind, float(value))
    elif kind != "op":
        raise SystemExit(f"unknown variant {name!r}: op, fraction:F or one of {LAYER_GROUPS} with :S")
    return translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--variants", required=True, help="comma-separated, e.g. keys:0.8,keys-global:0.8,fraction:0.3")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target = load_model(args.source), load_model(args.target)
    shipped = load_translator(resolve_translator_path(f"{source.name}__{target.name}"))
    translators = {name: variant(shipped, target.spec, name) for name in ("op", *args.variants.split(","))}
    samples = corpus_samples(args, source.tokenizer)
    tail = translators["op"].card.native_tail
    result = {"translator": translators["op"].card.version, "corpus": _portable(args.corpus), "seed": args.seed}
    result |= compare_nll(source, target, translators, samples, tail)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    for name in translators:
        scores = result[name]
        print(f"{name:>18}  retention {scores['retention']:.3f}  content gain {scores['content_gain']:.3f}")


if __name__ == "__main__":
    main()
