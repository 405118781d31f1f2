"""Can the target's own first layers fix copying from a translated cache? A closed-form probe.

For each prefix depth m, on recall samples (``samples.with_recall``) of held-out contexts:
``native first m`` puts the target's own first m layers into the translated cache; ``+ridge(h_m)``
also corrects every later layer with a ridge map from the target's residual entering layer m
(after that layer's input norm) to the translator's error there, fitted on training contexts.
Prints the standardised row error of the later layers and the recall retention of each cache.

    python reports/experiments/copying/native_prefix_probe.py --target qwen2.5-0.5b \
        --checkpoint ~/.cache/mot/train-stage3/smollm2-135m__qwen2.5-0.5b --depths 2,6,12
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


@torch.no_grad()
def collect(source, target, translator, samples, depths, recipe):
    """(prepared sample, translated rows, {m: normed residual entering layer m}) per sample."""
    layers = target.model.get_decoder().layers
    out = []
    for sample in samples:
        p = prepare(source, target, sample, recipe.continuation_tokens, recipe.native_tail)
        states = target.model(input_ids=p.target_ids[:, : p.keep], output_hidden_states=True).hidden_states
        hidden = {m: layers[m].input_layernorm(states[m])[0].float() for m in depths}
        out.append((p, translated_rows(translator, p, target), hidden))
    return out


def fit_correction(fitted, depth: int, target_std: torch.Tensor, alpha: float = 10.0):
    """Ridge from the standardised residual (plus a bias) to the translator's standardised row error."""
    hidden = torch.cat([h[depth][1:] for _, _, h in fitted])  # row 0: the attention sink, replaced natively
    mean, std = hidden.mean(0), hidden.std(0).clamp_min(1e-4)
    x = torch.cat((torch.ones(len(hidden), 1), (hidden - mean) / std), dim=1)
    error = torch.cat([(p.native_rows[1:] - rows[1:]) / target_std for p, rows, _ in fitted])
    weight = torch.linalg.solve(x.T @ x + alpha * torch.eye(x.shape[1]), x.T @ error.flatten(1))
    return mean, std, weight.reshape(x.shape[1], *error.shape[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--depths", default="2,6,12", help="prefix depths m (comma-separated)")
    parser.add_argument("--fit-contexts", type=int, default=24, help="256-token training contexts for the ridge")
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(2)
    depths = [int(m) for m in args.depths.split(",")]
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(args.checkpoint).eval()
    split, recipe = pull_corpus(), Recipe()
    cut = lambda split_name, count, seed: cut_samples(  # noqa: E731
        split.texts(split_name), source.tokenizer, context_tokens=256, count=count, seed=seed
    )
    fit_samples, held_out = cut("train", args.fit_contexts, 5), cut("validation", args.samples, 1)
    fitted = collect(source, target, translator, fit_samples, depths, recipe)
    evaluated = collect(source, target, translator, with_recall(held_out, 1.0, seed=1), depths, recipe)
    std = translator.target_std
    print("| prefix depth m | row error, later layers (translated -> corrected) | cache | recall retention |")
    print("|---|---|---|---|")
    for m in depths:
        mean, hidden_std, weight = fit_correction(fitted, m, std)
        nll: dict[str, float] = {}
        error = {"translated": 0.0, "corrected": 0.0}
        for p, rows, hidden in evaluated:
            x = torch.cat((torch.ones(p.keep, 1), (hidden[m] - mean) / hidden_std), dim=1)
            prefix_only = rows.clone()
            prefix_only[:, :m] = p.native_rows[:, :m]
            corrected = rows + torch.einsum("tf,flo->tlo", x, weight) * std
            corrected[:, :m] = p.native_rows[:, :m]
            for name, candidate in (("translated", rows), ("corrected", corrected)):
                diff = (candidate[1:, m:] - p.native_rows[1:, m:]) / std[m:]
                error[name] += diff.pow(2).mean().item() / len(evaluated)
            caches = {
                "native": p.native_rows,
                "translated": rows,
                f"native first {m}": prefix_only,
                f"+ridge(h{m})": corrected,
                "none": None,
            }
            with torch.no_grad():
                for name, cache_rows in caches.items():
                    cache = None if cache_rows is None else rows_model_cache(target, cache_rows, p.target_ids, p.keep)
                    logits = continuation_logits(target, cache, p.tail_ids, p.continuation_ids)
                    value = nll_per_token(logits, p.continuation_ids).mean().item() / len(evaluated)
                    nll[name] = nll.get(name, 0.0) + value
        for name in ("translated", f"native first {m}", f"+ridge(h{m})"):
            print(
                f"| {m} | {error['translated']:.3f} -> {error['corrected']:.3f} | {name} | "
                f"{retention(nll['none'], nll[name], nll['native']):.3f} |"
            )


if __name__ == "__main__":
    main()
