"""Which part of a translated cache costs the target its context?

Held-out contexts scored with caches that mix native and translated rows: keys vs values, native
keys in one group of target layers at a time, and (``--continuation plain``) native rows for the
context's last tokens, for the global or the sliding-window layers, and the translated keys
renormalised the way the target's own ``k_norm`` normalises its keys (targets that have one).
``--continuation recall`` (samples.with_recall: the continuation repeats a passage of the
context, which the native target predicts by copying) asks whether the target can copy; ``plain``
scores the text that really follows. Prints retention ((none - condition) / (none - native) of
the continuation NLL) per condition.

    python reports/experiments/copying/swap_diagnostic.py --target qwen2.5-0.5b \
        --checkpoint checkpoints/smollm2-135m__qwen2.5-0.5b --samples 8
    python reports/experiments/copying/swap_diagnostic.py --target gemma3-270m \
        --checkpoint checkpoints/smollm2-135m__gemma3-270m --samples 8 --context-tokens 480 \
        --continuation plain --group 6 --seed 7
    python reports/experiments/copying/swap_diagnostic.py --target gemma3-270m \
        --checkpoint checkpoints/smollm2-135m__gemma3-270m --samples 8 --context-tokens 480 \
        --continuation plain --group 6 --seed 7 --corpus $MOT_HOME/data/news/dev.jsonl

``--corpus`` (.txt, or .jsonl with a "text" field) scores other text than the validation speeches.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from mot_core.data import pull_corpus
from mot_core.evaluation import retention
from mot_core.loading import load_model
from mot_core.translation.features import key_columns
from mot_core.translation.objective import (
    continuation_logits,
    nll_per_token,
    prepare,
    rows_model_cache,
    translated_rows,
)
from mot_core.translation.samples import cut_samples, read_corpus, with_recall
from mot_core.translation.train import Recipe
from mot_core.translation.translator import load_translator


def renormalised_keys(target, rows: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | None:
    """``rows`` with each key rescaled to unit RMS under the target's ``k_norm`` gain, as the
    target's own keys are (None if its attention has no ``k_norm``). Dimensions with zero gain
    are zero in every native key, and stay zero."""
    layers = target.model.get_decoder().layers
    if not hasattr(layers[0].self_attn, "k_norm"):
        return None
    offset = 1.0 if target.spec.model_type.startswith("gemma") else 0.0  # Gemma's RMSNorm scales by 1 + w
    gains = torch.stack([offset + layer.self_attn.k_norm.weight.float() for layer in layers])  # [L, D]
    live = gains.abs() > 1e-6
    out = rows.clone()
    k = rows[:, :, keys].unflatten(-1, (target.spec.num_kv_heads, -1))  # [T, L, H, D]
    unit = torch.where(live[:, None], k / torch.where(live, gains, 1.0)[:, None], 0.0)
    rms = (unit.pow(2).sum(-1, keepdim=True) / live.sum(-1)[:, None, None]).sqrt().clamp_min(1e-6)
    out[:, :, keys] = (unit / rms * gains[:, None]).flatten(-2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--context-tokens", type=int, default=256)
    parser.add_argument("--group", type=int, default=4, help="target layers per group of native keys")
    parser.add_argument("--continuation", choices=("recall", "plain"), default="recall")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, help="text to score (default: the validation speeches)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(args.checkpoint).eval()
    documents = read_corpus(args.corpus) if args.corpus else pull_corpus().texts("validation")
    contexts = args.context_tokens
    plain = cut_samples(documents, source.tokenizer, context_tokens=contexts, count=args.samples, seed=args.seed)
    keys, layers = key_columns(target.spec), target.spec.num_layers
    groups = [list(range(i, min(layers, i + args.group))) for i in range(0, layers, args.group)]
    windowed = [i for i, w in enumerate(target.spec.sliding_windows) if w is not None]
    recipe = Recipe()  # scored as in training
    samples = with_recall(plain, 1.0, seed=args.seed) if args.continuation == "recall" else plain
    nll: dict[str, float] = {}
    with torch.no_grad():
        for sample in samples:
            p = prepare(source, target, sample, recipe.continuation_tokens, recipe.native_tail)
            if p.native_rows is None:
                raise SystemExit(f"--context-tokens {contexts} is past {args.target}'s sliding window")
            ours, native = translated_rows(translator, p, target), p.native_rows
            caches = {
                "native": native,
                "translated": ours,
                "native keys, translated values": torch.where(keys, native, ours),
                "translated keys, native values": torch.where(keys, ours, native),
            }
            for group in groups:
                rows = ours.clone()
                rows[:, group] = torch.where(keys, native[:, group], ours[:, group])
                caches[f"native keys in layers {group[0]}-{group[-1]} only"] = rows
            if args.continuation == "plain":
                for name, chosen in (
                    ("sliding-window", windowed),
                    ("global", sorted(set(range(layers)) - set(windowed))),
                ):
                    if chosen and len(chosen) < layers:
                        rows = ours.clone()
                        rows[:, chosen] = native[:, chosen]
                        caches[f"native rows in the {name} layers"] = rows
                for last in (32, 128):
                    rows = ours.clone()
                    rows[-last:] = native[-last:]
                    caches[f"native rows for the last {last} tokens"] = rows
                renormalised = renormalised_keys(target, ours, keys)
                if renormalised is not None:
                    caches["translated keys renormalised (k_norm)"] = renormalised
            scored = {name: rows_model_cache(target, rows, p.target_ids, p.keep) for name, rows in caches.items()}
            scored["none"] = None
            for name, cache in scored.items():
                logits = continuation_logits(target, cache, p.tail_ids, p.continuation_ids)
                nll[name] = nll.get(name, 0.0) + nll_per_token(logits, p.continuation_ids).mean().item() / len(samples)
    print(f"| condition | {args.continuation} NLL | {args.continuation} retention |\n|---|---|---|")
    for name, value in nll.items():
        print(f"| {name} | {value:.3f} | {retention(nll['none'], value, nll['native']):.3f} |")


if __name__ == "__main__":
    main()
