"""Which part of a translated cache stops the target copying from its context?

Recall samples (samples.with_recall: the continuation repeats a passage of the context, which the
native target predicts by copying) scored with caches that mix native and translated rows:
keys vs values, and native keys in one group of target layers at a time. Prints recall retention
((none - condition) / (none - native) of the continuation NLL) per condition.

    python reports/experiments/copying/swap_diagnostic.py --target qwen2.5-0.5b \
        --checkpoint checkpoints/smollm2-135m__qwen2.5-0.5b --samples 8
"""

from __future__ import annotations

import argparse

import torch

from mot_core.data import pull_corpus
from mot_core.evaluation import retention
from mot_core.loading import load_model
from mot_core.translation.objective import (
    continuation_logits,
    nll_per_token,
    prepare,
    rows_model_cache,
    translated_rows,
)
from mot_core.translation.samples import cut_samples, with_recall
from mot_core.translation.train import Recipe
from mot_core.translation.translator import load_translator


def key_columns(spec) -> torch.Tensor:
    """Mask of the key columns of a ``[K heads | V heads]`` row (``features.kv_rows``)."""
    mask = torch.zeros(2 * spec.num_kv_heads * spec.head_dim, dtype=torch.bool)
    for head in range(spec.num_kv_heads):
        mask[head * 2 * spec.head_dim : head * 2 * spec.head_dim + spec.head_dim] = True
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--context-tokens", type=int, default=256)
    parser.add_argument("--group", type=int, default=4, help="target layers per group of native keys")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(args.checkpoint).eval()
    documents = pull_corpus().texts("validation")
    plain = cut_samples(documents, source.tokenizer, context_tokens=args.context_tokens, count=args.samples, seed=1)
    keys, layers = key_columns(target.spec), target.spec.num_layers
    groups = [list(range(i, min(layers, i + args.group))) for i in range(0, layers, args.group)]
    recalls, recipe = with_recall(plain, 1.0, seed=1), Recipe()  # scored as in training
    nll: dict[str, float] = {}
    with torch.no_grad():
        for sample in recalls:
            p = prepare(source, target, sample, recipe.continuation_tokens, recipe.native_tail)
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
            scored = {name: rows_model_cache(target, rows, p.target_ids, p.keep) for name, rows in caches.items()}
            scored["none"] = None
            for name, cache in scored.items():
                logits = continuation_logits(target, cache, p.tail_ids, p.continuation_ids)
                nll[name] = nll.get(name, 0.0) + nll_per_token(logits, p.continuation_ids).mean().item() / len(recalls)
    print("| condition | recall NLL | recall retention |\n|---|---|---|")
    for name, value in nll.items():
        print(f"| {name} | {value:.3f} | {retention(nll['none'], value, nll['native']):.3f} |")


if __name__ == "__main__":
    main()
