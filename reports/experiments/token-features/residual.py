"""End to end at the operating point: the shipped translator plus a token-feature value correction.

``probe.py`` showed that the target's own layer-0 rows make a *ridge* value map carry over to other
text. Before building them into the translator, this asks the same of the shipped one, frozen: a
ridge map from the target's layer-0 row of each token to what the translator gets wrong in the
values of layers 1.. (native minus translated), fitted on training-speech contexts inside the
sliding window, added to the translated values before the target's recompute. Scored as
``compare.py`` scores (same samples, same controls, each at the card's operating point).

    python reports/experiments/token-features/residual.py -t gemma3-270m \
        --corpus $MOT_HOME/data/news/dev.jsonl --samples 30 --seed 7 --out gemma3-residual-news-dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from mot_core.data import pull_corpus
from mot_core.kv_cache import KVCache
from mot_core.loading import load_model
from mot_core.translation.assemble import rows_to_cache
from mot_core.translation.objective import operating_point_cache
from mot_core.translation.pairs import PairRows, pair_rows
from mot_core.translation.recompute import blend
from mot_core.translation.ridge import RidgeFitter
from mot_core.translation.samples import cut_samples, read_corpus
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import content_scores, score_conditions  # noqa: E402
from probe import chunks, value_columns  # noqa: E402


def value_view(rows: torch.Tensor, spec) -> torch.Tensor:
    """``[T, L, H, D]`` view of the value columns of ``rows [T, L, 2*H*D]``."""
    t, layers, _ = rows.shape
    return rows.view(t, layers, spec.num_kv_heads, 2, spec.head_dim)[:, :, :, 1]


def fit_correction(source, target, translator, contexts: list[str], alpha: float):
    fitter = None
    for text in tqdm(contexts, desc="fit correction"):
        rows = pair_rows(source, target, text)
        translated = translator.inference_rows(rows.aligned, all_positions=True)
        residual = value_columns(rows, target.spec) - value_columns(PairRows(rows.aligned, translated), target.spec)
        x, y = rows.target[1:, 0], residual[1:]
        fitter = fitter or RidgeFitter(x.shape[1], y[0].numel())
        fitter.add(x, y)
    return fitter.solve(alpha)


def corrected_operating_point(translator, target, p, correction) -> KVCache:
    """``objective.operating_point_cache`` with the correction added to the translated values first."""
    card = translator.card
    rows = translator.inference_rows(p.aligned_rows[: p.keep], all_positions=True)
    rows[0] = p.head_rows
    weight, x_mean, y_mean = correction
    spec = target.spec
    delta = (p.first_layer_rows[1:] - x_mean) @ weight + y_mean
    value_view(rows, spec)[1:, 1:] += delta.view(p.keep - 1, -1, spec.num_kv_heads, spec.head_dim)
    ids = p.target_ids[:, : p.keep]
    cache = rows_to_cache(rows, spec, ids, target.fingerprint.id, all_positions=True, surprisal=p.surprisal)
    return blend(target, cache, card.operating_point)


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", default="gemma3-270m")
    parser.add_argument("--corpus", type=Path, action="append", required=True, help="repeat for several texts")
    parser.add_argument("--samples", type=int, action="append", required=True, help="one per --corpus")
    parser.add_argument("--seed", type=int, action="append", required=True, help="one per --corpus")
    parser.add_argument("--fit-contexts", type=int, default=60)
    parser.add_argument("--fit-tokens", type=int, default=400)
    parser.add_argument("--alpha", type=float, default=1e-2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target = load_model(args.source), load_model(args.target)
    translator = load_translator(resolve_translator_path(f"{source.name}__{target.name}"))
    contexts = chunks(pull_corpus().texts("train"), source.tokenizer, args.fit_tokens, args.fit_contexts)
    correction = fit_correction(source, target, translator, contexts, args.alpha)
    results = {"fit_contexts": args.fit_contexts, "fit_tokens": args.fit_tokens, "alpha": args.alpha, "texts": []}

    def conditions_of(p, other) -> dict:
        return {
            "op": operating_point_cache(translator, p, target),
            "op/deranged": operating_point_cache(translator, other, target),
            "op+token": corrected_operating_point(translator, target, p, correction),
            "op+token/deranged": corrected_operating_point(translator, target, other, correction),
        }

    for corpus, count, seed in zip(args.corpus, args.samples, args.seed, strict=True):
        samples = cut_samples(read_corpus(corpus), source.tokenizer, context_tokens=1024, count=count, seed=seed)
        nll = score_conditions(source, target, samples, translator.card.native_tail, conditions_of)
        entry = {"corpus": str(corpus), "samples": len(samples), "seed": seed, "nll": nll}
        for name in ("op", "op+token"):
            entry[name] = content_scores(nll, name)
            print(
                f"{corpus.name:>20} {name:>9}  retention {entry[name]['retention']:.3f}  "
                f"content gain {entry[name]['content_gain']:.3f}",
                flush=True,
            )
        results["texts"].append(entry)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
