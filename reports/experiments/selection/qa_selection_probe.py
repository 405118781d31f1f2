"""Which context tokens should the target recompute so that facts survive translation?

On context-conflict QA items (data/eval/qa_dev.jsonl: the answer is only in the context), the
target scores both choices after a cache of the context in which a fraction of the tokens was
recomputed natively over the translation of the rest (recompute.recompute_positions), the
tokens chosen by:

- ``error``: the translator's layer-0 error (the first selection of recompute.blend),
- ``surprisal``: the source model's surprisal at each token (the selection shipped now),
- ``question``: the source model's attention from the question to the context (knows the question),
- ``answer span``: the tokens of the answer's first occurrence in the context and 3 on each side
  (an oracle: it knows the answer; an upper bound for any selection, not a method).

Prints QA accuracy and QA retention ((acc - none) / (native - none)) per condition.

    python reports/experiments/selection/qa_selection_probe.py --target qwen2.5-0.5b --items 40
"""

from __future__ import annotations

import argparse
import json

import torch
from tqdm import tqdm

from mot_core.cache_ops import recompute_positions
from mot_core.evaluation import answers_right, qa_retention
from mot_core.loading import load_model
from mot_core.translation.objective import prepare, translated_cache
from mot_core.translation.recompute import OperatingPoint
from mot_core.translation.samples import Sample
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def prompt_of(item: dict) -> str:
    return f"\nQuestion: {item['question']}\nAnswer:"  # as evaluation.answers_right scores it


def qa_items(offset: int, count: int) -> list[dict]:
    with open("data/eval/qa_dev.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f][offset : offset + count]


def print_table(title: str, right: dict[str, int], items: int) -> None:
    """QA accuracy and retention per selection, as a Markdown table."""
    accuracy = {name: n / items for name, n in right.items()}
    retention = qa_retention(accuracy) | {"native": 1.0, "none": 0.0}
    print(f"{title}\n| selection | QA accuracy | QA retention |\n|---|---|---|")
    for name, acc in accuracy.items():
        kept = retention[name]
        print(f"| {name} | {acc:.3f} | {kept if kept is not None else float('nan'):.3f} |")


@torch.no_grad()
def question_attention(source, prepared, item: dict) -> torch.Tensor:
    """Attention mass from the question's tokens to each context token, all source layers and heads,
    put on target tokens (Alignment.overlap_max)."""
    context_ids = torch.tensor([prepared.alignment.source_ids])
    question = source.tokenizer(prompt_of(item), add_special_tokens=False, return_tensors="pt")["input_ids"]
    attentions = source.model(input_ids=torch.cat((context_ids, question), -1), output_attentions=True).attentions
    n = context_ids.shape[-1]
    mass = torch.stack([a[0, :, n:, :n] for a in attentions]).sum((0, 1, 2))
    mass[0] = 0  # the attention sink
    return prepared.alignment.overlap_max(mass)


def answer_span(prepared, item: dict, keep: int, radius: int = 3) -> torch.Tensor:
    start = item["context"].find(item["answer"])
    if start < 0:
        return torch.zeros(0, dtype=torch.long)
    end = start + len(item["answer"])
    hits = [i for i, (a, b) in enumerate(prepared.alignment.target_spans[:keep]) if a < end and b > start]
    around = torch.tensor(hits)[:, None] + torch.arange(-radius, radius + 1)[None]
    return around[(around >= 1) & (around < keep)].unique()


def conditions(source, target, translator, p, item: dict, fractions: list[float]) -> dict:
    """Builders of each condition's cache for one prepared item."""
    every = translated_cache(translator, p, target, OperatingPoint(0.0))  # every position, nothing recomputed yet
    by_question = question_attention(source, p, item)[: p.keep]
    builders = {
        "native": lambda: p.native_cache,
        "none": lambda: None,
        "translated": lambda: translated_cache(translator, p, target),
        "answer span (oracle)": lambda: recompute_positions(target, every, answer_span(p, item, p.keep)),
    }
    for f in fractions:
        for selection in ("error", "surprisal"):
            builders[f"{selection}@{f:g}"] = lambda f=f, s=selection: translated_cache(
                translator, p, target, OperatingPoint(f, s)
            )
        builders[f"question@{f:g}"] = lambda n=round(f * p.keep): recompute_positions(
            target, every, by_question[1:].topk(n).indices + 1
        )
    return builders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", help="translator dir (default: the shipped one)")
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--fractions", default="0.1,0.2")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    source.model.set_attn_implementation("eager")  # attention weights for the question selection
    translator = load_translator(resolve_translator_path(args.checkpoint or f"smollm2-135m__{args.target}")).eval()
    items = qa_items(0, args.items)
    fractions = [float(f) for f in args.fractions.split(",")]
    right: dict[str, int] = {}
    for item in tqdm(items, desc="qa", unit="item"):
        p = prepare(source, target, Sample(item["context"], " ", -1), 1, translator.card.native_tail)
        for name, build in conditions(source, target, translator, p, item, fractions).items():
            right[name] = right.get(name, 0) + answers_right(target, p, item, build())
    print_table(f"{len(items)} items, {args.target}", right, len(items))


if __name__ == "__main__":
    main()
