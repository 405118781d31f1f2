"""How the shipped Gemma-3 translator's rows compare with the target's own, per layer: the norm
ratio and cosine of each predicted key and value against the native one, and how much a native
key's norm varies across tokens (its coefficient of variation; ``k_norm`` keeps it nearly fixed).

Contexts of 440 source tokens, so that every layer, sliding ones included, holds every position
(``PreparedSample.native_rows``); the native head (position 0) is left out.

    python reports/experiments/attention-temperature/key_norms.py \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --samples 6
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from mot_core.loading import load_model
from mot_core.translation.objective import prepare
from mot_core.translation.samples import cut_samples, read_corpus
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-t", "--target", default="gemma3-270m")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(resolve_translator_path(f"{source.name}__{target.name}"))
    heads, dim = target.spec.num_kv_heads, target.spec.head_dim
    samples = cut_samples(
        read_corpus(args.corpus), source.tokenizer, context_tokens=440, count=args.samples, seed=args.seed
    )
    stats: dict[str, list[torch.Tensor]] = {}
    for sample in samples:
        p = prepare(source, target, sample, 8, translator.card.native_tail)
        predicted = translator.predict_rows(p.aligned_rows[: p.keep], all_positions=True)[1:]
        native = p.native_rows[1:]
        shape = (*native.shape[:2], heads, 2, dim)  # per head [K_h | V_h]
        predicted, native = predicted.reshape(shape), native.reshape(shape)
        for half, name in ((0, "key"), (1, "value")):
            pred, nat = predicted[..., half, :], native[..., half, :]
            ratio = pred.norm(dim=-1) / nat.norm(dim=-1)
            stats.setdefault(f"{name} norm ratio", []).append(ratio.mean((0, 2)))
            stats.setdefault(f"{name} cosine", []).append(F.cosine_similarity(pred, nat, dim=-1).mean((0, 2)))
        norms = native[..., 0, :].norm(dim=-1)
        stats.setdefault("native key norm cv", []).append((norms.std(0) / norms.mean(0)).mean(-1))
    print("per target layer, mean over tokens and heads:")
    for name, values in stats.items():
        print(f"{name:>20}: " + " ".join(f"{v:.2f}" for v in torch.stack(values).mean(0)))


if __name__ == "__main__":
    main()
