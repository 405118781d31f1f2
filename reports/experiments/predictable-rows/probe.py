"""Probe (stop 56): do the target's predictions get better if it never reads the translated rows of
the context's most predictable tokens?

Out of its training register a translated cache can be worse than no context at all (Gemma-3's
deranged control on the Wikipedia-style text: -0.26 retention in the 200-sample run), so some
translated rows must be doing harm. The tokens the source found easiest to predict (lowest
``KVCache.surprisal``) are function words and word pieces: their rows carry register, not facts,
and a continuation needs the facts. Per sample, the card's operating point (``op``) and the same
cache with the most predictable ``D`` of the rows that were translated and not recomputed hidden
from the target by its attention mask (``predictableD`` for each ``--drops`` D; the head and the
recomputed rows are always read); with ``--random``, as many of them drawn at random
(``randomD``), the control. The recompute itself still read every row, so this measures
what reading the rows costs the continuation, not a cache built without them. With ``--extra``,
the operating point gets that share of the context on top as an attended share, like the
candidate points of ``../attended-recompute``.

Retention and content gain as ``../through-recompute/compare.py`` (the deranged control hides the
same share of its own rows); with ``--qa``, two-choice accuracy on qa_dev items instead.

    python reports/experiments/predictable-rows/probe.py -t gemma3-270m \\
        --corpus out/eval-other-prose/qa_dev_contexts.txt --out gemma3/wiki-style.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
import compare  # noqa: E402
from compare import content_scores, parse_with_qa_mode, qa_items, score_conditions  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.evaluation as evaluation  # noqa: E402
from mot_core.cache_ops import to_model_cache  # noqa: E402
from mot_core.kv_cache import KVCache  # noqa: E402
from mot_core.translation.objective import continuation_logits, prepare, translated_cache  # noqa: E402
from mot_core.translation.recompute import OperatingPoint, blend  # noqa: E402
from mot_core.translation.samples import Sample  # noqa: E402


@dataclass
class WithHiddenRows(KVCache):
    """A cache whose rows at ``hidden`` the target must not read."""

    hidden: torch.Tensor | None = None


def hiding(lm, cache: KVCache):
    """``to_model_cache``, noting on the model's cache which positions its reader must mask."""
    model_cache = to_model_cache(lm, cache)
    model_cache.hidden, model_cache.context_len = getattr(cache, "hidden", None), cache.seq_len
    return model_cache


def masked_logits(target, model_cache, tail_ids: torch.Tensor, continuation_ids: torch.Tensor) -> torch.Tensor:
    """``continuation_logits`` with the cache's hidden positions masked out (positions unchanged)."""
    hidden = getattr(model_cache, "hidden", None)
    if hidden is None:
        return continuation_logits(target, model_cache, tail_ids, continuation_ids)
    ids = torch.cat((tail_ids, continuation_ids[:, :-1]), dim=-1)
    mask = torch.ones(1, model_cache.context_len + ids.shape[-1], dtype=torch.long)
    mask[0, hidden] = 0
    logits = target.model(input_ids=ids, cache=model_cache, use_cache=True, attention_mask=mask).logits[0].float()
    return logits[tail_ids.shape[-1] - 1 :]


compare.to_model_cache = evaluation.to_model_cache = hiding
compare.continuation_logits = evaluation.continuation_logits = masked_logits


def blended(translator, prepared, target, point: OperatingPoint) -> tuple[KVCache, torch.Tensor]:
    """The cache at ``point`` and which positions hold the target's own rows (head and recompute)."""
    raw = translated_cache(translator, prepared, target, OperatingPoint(0.0))
    cache = blend(target, raw, point)
    spec, length = target.spec, cache.seq_len
    full = next(i for i in range(spec.num_layers) if spec.kept_positions(i, length) == length)  # a global layer
    native = (cache.keys[full][0] != raw.keys[full][0]).any(-1).any(0)
    native[0] = True
    return cache, native


def variants(cache: KVCache, native: torch.Tensor, drops: list[float], control: bool = False) -> dict[str, KVCache]:
    """``op`` and, per share D, the same rows with the most predictable D of the translated ones
    hidden (``predictableD``); with ``control``, also as many translated rows drawn at random
    (``randomD``, seeded by the context's tokens)."""
    surprisal = cache.surprisal[0].masked_fill(native, torch.inf)
    translated = int((~native).sum())
    orders = {"predictable": surprisal.argsort()}
    if control:
        generator = torch.Generator().manual_seed(int(cache.token_ids.sum()))
        candidates = (~native).nonzero()[:, 0]
        orders["random"] = candidates[torch.randperm(translated, generator=generator)]
    out = {"op": cache}
    rows = {f.name: getattr(cache, f.name) for f in fields(cache)}
    for kind, order in orders.items():
        for share in drops:
            out[f"{kind}{share:g}"] = WithHiddenRows(**rows, hidden=order[: int(share * translated)])
    return out


def main() -> None:
    parser = sample_parser(__doc__, needs_corpus=False)
    parser.add_argument("--drops", default="0.3,0.6", help="comma-separated shares of the translated rows to hide")
    parser.add_argument("--random", action="store_true", help="also hide as many rows drawn at random")
    parser.add_argument("--extra", type=float, default=0.0, help="attended share on top of the card's point")
    args = parse_with_qa_mode(parser)
    source, target, translator = models_and_translator(args)
    point = translator.card.operating_point
    if args.extra:
        point = replace(point, fraction=point.fraction + args.extra, attended=point.attended + args.extra)
    drops = [float(x) for x in args.drops.split(",")]
    print("operating point:", point)

    def at_point(p) -> dict[str, KVCache]:
        return variants(*blended(translator, p, target, point), drops, args.random)

    if args.qa:
        items = qa_items(args.qa, args.qa_items)
        right: dict[str, int] = {}
        with torch.no_grad():
            for item in tqdm(items, desc="qa"):
                p = prepare(source, target, Sample(item["context"], " ", -1), 1, translator.card.native_tail)
                for name, cache in {"native": p.native_cache, "none": None, **at_point(p)}.items():
                    right[name] = right.get(name, 0) + evaluation.answers_right(target, p, item, cache)
        accuracy = {name: n / len(items) for name, n in right.items()}
        result = {"items": len(items), "accuracy": accuracy, "qa_retention": evaluation.qa_retention(accuracy)}
        print("accuracy", json.dumps(accuracy), "QA retention", json.dumps(result["qa_retention"]))
    else:

        def conditions_of(p, other) -> dict[str, KVCache]:
            return at_point(p) | {f"{name}/deranged": c for name, c in at_point(other).items()}

        samples = compare.corpus_samples(args, source.tokenizer)
        nll = score_conditions(source, target, samples, translator.card.native_tail, conditions_of)
        kinds = ("predictable", "random") if args.random else ("predictable",)
        names = ["op", *(f"{kind}{share:g}" for kind in kinds for share in drops)]
        result = {"samples": len(samples), "nll": nll} | {name: content_scores(nll, name) for name in names}
        for name in names:
            s = result[name]
            print(f"{name:16} retention {s['retention']:.3f} deranged {s['deranged']:.3f}", end=" ")
            print(f"content gain {s['content_gain']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"operating_point": str(point)} | result, indent=1))


if __name__ == "__main__":
    main()
