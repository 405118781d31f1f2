"""What the translator's training corpus holds of each target token: counts from the target
tokenizer over the training corpora (the JSONL files with a "text" field that ``mot train`` read),
shared by the scripts here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from mot_core.paths import mot_home

SPEECHES = mot_home() / "data/sotu/train.jsonl"
NEWS = mot_home() / "data/news/train.jsonl"


def training_corpora(target_name: str) -> list[Path]:
    """The corpora the shipped translator of ``target_name`` was trained on (its card's data)."""
    return [SPEECHES, NEWS] if target_name.startswith("qwen") else [SPEECHES]


def token_counts(tokenizer, corpora: list[Path]) -> torch.Tensor:
    """``[V]``: how often each target token id occurs in ``corpora``."""
    counts: Counter[int] = Counter()
    for corpus in corpora:
        for line in corpus.read_text(encoding="utf-8").splitlines():
            counts.update(tokenizer(json.loads(line)["text"], add_special_tokens=False).input_ids)
    table = torch.zeros(max(len(tokenizer), max(counts) + 1), dtype=torch.long)
    for token, n in counts.items():
        table[token] = n
    return table


if __name__ == "__main__":  # python reports/experiments/token-coverage/coverage.py gemma3-270m qwen2.5-0.5b
    import sys

    from mot_core.loading import load_model_meta

    for name in sys.argv[1:]:
        tokenizer = load_model_meta(name).tokenizer
        counts = token_counts(tokenizer, training_corpora(name))
        seen = int((counts >= 10).sum())
        print(f"{name}: {int(counts.sum())} training tokens, {seen} of {len(tokenizer)} ids seen >= 10 times")
