"""Two translators of one pair, side by side on the same samples, each at its card's operating point.

Why: deciding whether a fine-tuned translator replaces the shipped one needs a paired comparison
that costs minutes, not the hours of ``mot eval`` (whose ridge map and timings do not depend on the
translator). Per sample: ``native`` and ``none`` once, then per translator ``translated`` and
``deranged`` (the translation of the control ``mot eval`` uses, ``evaluation.control_index``);
retention and content gain as DESIGN.md defines them. With ``--qa``, two-choice accuracy and QA
retention on a range of qa_dev items (``evaluation.answers_right``). Prints a table and writes JSON.

    python reports/experiments/through-recompute/compare.py -t qwen2.5-0.5b \
        --new /tmp/ck/smollm2-135m__qwen2.5-0.5b --corpus $MOT_HOME/data/sotu/validation.jsonl \
        --samples 40 --qa data/eval/qa_dev.jsonl --qa-items 100:300 --out compare.json

Several ``--new`` checkpoints are scored on the same samples as ``new``, ``new2``, ... (an ablation
beside its candidate costs one more translator per sample, not a second run).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from mot_core.cache_ops import to_model_cache
from mot_core.evaluation import _with_neighbours, answers_right, qa_retention, retention
from mot_core.loading import load_model
from mot_core.paths import mot_home
from mot_core.translation.objective import continuation_logits, nll_per_token, operating_point_cache, prepare
from mot_core.translation.samples import Sample, cut_samples, read_corpus
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


@torch.no_grad()
def score_conditions(source, target, samples: list[Sample], native_tail: int, conditions_of: Callable) -> dict:
    """Mean NLL per continuation token under ``native``, ``none`` and each cache that
    ``conditions_of(prepared, its_control)`` names (the probes beside this script score with it too)."""
    sums: dict[str, float] = {}
    tokens = 0
    prepare_one = lambda s: prepare(source, target, s, 64, native_tail)  # noqa: E731
    for _, p, other in tqdm(_with_neighbours(prepare_one, samples), total=len(samples), desc="samples"):
        caches = {"native": p.native_cache, "none": None, **conditions_of(p, other)}
        for condition, cache in caches.items():
            model_cache = None if cache is None else to_model_cache(target, cache)
            logits = continuation_logits(target, model_cache, p.tail_ids, p.continuation_ids)
            sums[condition] = sums.get(condition, 0.0) + nll_per_token(logits, p.continuation_ids).sum().item()
        tokens += p.continuation_ids.shape[-1]
    return {c: s / tokens for c, s in sums.items()}


def corpus_samples(args: argparse.Namespace, tokenizer) -> list[Sample]:
    """The samples of ``--corpus`` that ``--context-tokens``, ``--samples`` and ``--seed`` name (the
    probes beside this script take the same options and cut the same samples)."""
    documents = read_corpus(args.corpus)
    return cut_samples(documents, tokenizer, context_tokens=args.context_tokens, count=args.samples, seed=args.seed)


def content_scores(nll: dict[str, float], name: str) -> dict[str, float]:
    """Retention of condition ``name``, of its ``/deranged`` control, and the content gain between them."""
    kept = retention(nll["none"], nll[name], nll["native"])
    control = retention(nll["none"], nll[f"{name}/deranged"], nll["native"])
    return {"retention": kept, "deranged": control, "content_gain": kept - control}


def compare_nll(source, target, translators: dict, samples: list[Sample], native_tail: int) -> dict:
    """Each translator at its card's operating point, and on its control (no greedy decoding: NLL decides)."""

    def conditions_of(p, other) -> dict:
        caches = {}
        for name, t in translators.items():
            caches[name] = operating_point_cache(t, p, target)
            caches[f"{name}/deranged"] = operating_point_cache(t, other, target)
        return caches

    nll = score_conditions(source, target, samples, native_tail, conditions_of)
    return {"samples": len(samples), "nll": nll} | {name: content_scores(nll, name) for name in translators}


def compare_qa(source, target, translators: dict, items: list[dict], native_tail: int) -> dict:
    right = {c: 0 for c in ("native", "none", *translators)}
    for item in tqdm(items, desc="qa"):
        p = prepare(source, target, Sample(item["context"], " ", -1), 1, native_tail)
        right["native"] += answers_right(target, p, item, p.native_cache)
        right["none"] += answers_right(target, p, item, None)
        for name, t in translators.items():
            right[name] += answers_right(target, p, item, operating_point_cache(t, p, target))
    accuracy = {c: n / len(items) for c, n in right.items()}
    return {"items": len(items), "accuracy": accuracy, "qa_retention": qa_retention(accuracy)}


def qa_items(path: Path, span: str) -> list[dict]:
    """Items ``START:STOP`` (``span``) of a qa_dev JSONL file."""
    start, stop = (int(v) for v in span.split(":"))
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[start:stop]]


def parse_with_qa_mode(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The probe's arguments with ``--qa``/``--qa-items`` (``score_variants`` scores QA accuracy
    instead of a corpus: ``--corpus`` or ``--qa`` is needed) and ``--out``."""
    parser.add_argument("--qa", type=Path, help="score QA accuracy on this qa_dev file instead of --corpus")
    parser.add_argument("--qa-items", default="100:200", help="START:STOP of its items")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if not (args.qa or args.corpus):
        parser.error("give --corpus (or --qa)")
    return args


def score_variants(
    args: argparse.Namespace, source, target, translators: dict, native_tail: int, samples: list | None = None
) -> dict:
    """Inference-time variants side by side, as the probes score them: with ``args.qa``, QA accuracy
    on its items ``args.qa_items``; otherwise retention and content gain on ``args.corpus`` (its
    ``samples``, if the caller has cut them already). Prints them."""
    if getattr(args, "qa", None):  # a probe without a QA mode has no --qa
        result = compare_qa(source, target, translators, qa_items(args.qa, args.qa_items), native_tail)
        print("accuracy", json.dumps(result["accuracy"]), "QA retention", json.dumps(result["qa_retention"]))
        return result
    samples = samples if samples is not None else corpus_samples(args, source.tokenizer)
    result = compare_nll(source, target, translators, samples, native_tail)
    for name in translators:
        scores = result[name]
        print(f"{name:>12} retention {scores['retention']:.3f} content gain {scores['content_gain']:.3f}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--old", help="checkpoint dir (default: the shipped translator)")
    parser.add_argument(
        "--new", required=True, nargs="+", help="checkpoint dir of the candidate; more are scored as new2, new3, ..."
    )
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--qa", type=Path)
    parser.add_argument("--qa-items", default="100:300", help="START:STOP of qa_dev items")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target = load_model(args.source), load_model(args.target)
    old = args.old or resolve_translator_path(f"{source.name}__{target.name}")
    candidates = {"new" if i == 0 else f"new{i + 1}": path for i, path in enumerate(args.new)}
    translators = {"old": load_translator(old)} | {k: load_translator(path) for k, path in candidates.items()}
    tails = {t.card.native_tail for t in translators.values()}
    if len(tails) != 1:
        raise SystemExit(f"the translators keep different native tails {tails}")
    tail = tails.pop()
    result = {"old": _portable(old)} | {k: _portable(path) for k, path in candidates.items()}
    result |= {f"{k}_version": t.card.version for k, t in translators.items()}
    if args.corpus:
        samples = corpus_samples(args, source.tokenizer)
        result["corpus"] = {
            "path": _portable(args.corpus),
            "seed": args.seed,
            **compare_nll(source, target, translators, samples, tail),
        }
        _write(args.out, result, translators)
    if args.qa:
        result["qa"] = {
            "range": args.qa_items,
            **compare_qa(source, target, translators, qa_items(args.qa, args.qa_items), tail),
        }
        _write(args.out, result, translators)


def _portable(path: Path) -> str:
    """A path as the committed results name it ($MOT_HOME/..., or relative to the checkout), so
    they do not carry this machine's directories."""
    path = Path(path).resolve()
    for root, name in ((mot_home().resolve(), "$MOT_HOME"), (Path.cwd().resolve(), None)):
        if path.is_relative_to(root):
            relative = path.relative_to(root).as_posix()
            return f"{name}/{relative}" if name else relative
    return str(path)


def _write(out: Path, result: dict, translators: dict) -> None:
    """The JSON so far, and its table on stdout (after the corpus, then again after QA)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for name in translators:
        row = [f"{name:>4} {result[f'{name}_version']}"]
        if "corpus" in result:
            c = result["corpus"][name]
            row.append(f"retention {c['retention']:.3f} content gain {c['content_gain']:.3f}")
        if "qa" in result:
            q = result["qa"]
            row.append(f"QA {q['accuracy'][name]:.3f} (retention {q['qa_retention'][name]:.3f})")
        print("  ".join(row), flush=True)
    if "qa" in result:
        q = result["qa"]["accuracy"]
        print(f"QA native {q['native']:.3f} none {q['none']:.3f} over {result['qa']['items']} items", flush=True)


if __name__ == "__main__":
    main()
