"""Is the translation error out of register on the tokens the training corpus (almost) never had,
or on every token? Per cached position, the pure translation's relative squared error against the
target's own keys and values (``||k' - k||^2 / ||k||^2``, averaged over layers; positions every
layer keeps; position 0, the native head, left out), grouped by how often the position's target
token occurs in the shipped translator's training corpora (``coverage.py``). The texts and their
seeds are fixed (``TEXTS``: ``--corpus`` and ``--seed`` are not read); ``--samples`` per text.

    python reports/experiments/token-coverage/error_by_frequency.py -t gemma3-270m --out gemma3/error-by-frequency.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import corpus_samples  # noqa: E402
from coverage import token_counts, training_corpora  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.paths import mot_home  # noqa: E402
from mot_core.translation.objective import prepare, translated_cache  # noqa: E402

BINS = ((0, 0, "unseen"), (1, 9, "1-9"), (10, 999, "10-999"), (1000, None, ">=1000"))
TEXTS = {  # name: (corpus, seed); the other texts' seed cuts their acceptance runs' first samples
    "speeches": (mot_home() / "data/sotu/validation.jsonl", 7),
    "wiki-style": (Path("out/eval-other-prose/qa_dev_contexts.txt"), 1031),
    "moby-dick": (mot_home() / "data/moby-dick/moby-dick.txt", 1031),
}


def position_errors(cache, native) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Key and value relative errors ``[n]`` of the last ``n`` positions (those every layer keeps)."""
    n = min(min(cache.kept_len(i), native.kept_len(i)) for i in range(native.num_layers))
    keys, values = [], []
    for i in range(native.num_layers):
        for out, mine, theirs in ((keys, cache.keys[i], native.keys[i]), (values, cache.values[i], native.values[i])):
            a, b = mine[0, :, -n:].float(), theirs[0, :, -n:].float()
            out.append((a - b).pow(2).sum((0, 2)) / b.pow(2).sum((0, 2)))
    return torch.stack(keys).mean(0), torch.stack(values).mean(0), n


def _mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


@torch.no_grad()
def main() -> None:
    parser = sample_parser(__doc__, samples=6, corpus=TEXTS["speeches"][0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target, translator = models_and_translator(args)
    counts = token_counts(target.tokenizer, training_corpora(target.name))
    result = {}
    for text, (corpus, seed) in TEXTS.items():
        args.corpus, args.seed = corpus, seed
        errors = {label: ([], []) for *_, label in BINS}
        for sample in corpus_samples(args, source.tokenizer):
            prepared = prepare(source, target, sample, 1, translator.card.native_tail)
            cache = translated_cache(translator, prepared, target)  # pure translation
            key_err, value_err, n = position_errors(cache, prepared.native_cache)
            seen = counts[prepared.target_ids[0, prepared.keep - n : prepared.keep]]
            for low, high, label in BINS:
                chosen = (seen >= low) & (seen <= (high if high is not None else seen.max()))
                chosen[0] = chosen[0] and n < prepared.keep  # position 0 is the native head
                errors[label][0].extend(key_err[chosen].tolist())
                errors[label][1].extend(value_err[chosen].tolist())
        total = sum(len(k) for k, _ in errors.values())
        result[text] = {
            label: {"share": len(k) / total, "key_error": _mean(k), "value_error": _mean(v)}
            for label, (k, v) in errors.items()
        }
        print(text)
        for label, r in result[text].items():
            print(f"  {label:>7}  share {r['share']:.3f}  keys {r['key_error']:.3f}  values {r['value_error']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"samples": args.samples, "texts": result}, indent=1))


if __name__ == "__main__":
    main()
