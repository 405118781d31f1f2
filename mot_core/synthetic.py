"""A training register without a corpus: prose sampled from a language model.

The translators learn register by register (reports/experiments/register-mix/, literature-mix/):
each corpus added to the mix lifts text of its own kind, and the packages this project may fetch
hold no more public-domain prose. A model can write as much text as training wants, in any
register a prompt opens. Sampled text has a property the corpora lack: the names, places and
numbers it makes up are in no model's memory, so a target can predict them again only from its
context, which is the content a translation has to carry.

Documents: nucleus sampling (temperature 1, top-p 0.95; Holtzman et al., 2020) from ``PROMPTS``
in turn, end-of-text suppressed so each runs the full length; deterministic given the model,
the seed and the sizes. The prompts name no sea, ship or whale: *Moby-Dick* stays a test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mot_core.paths import data_dir, write_jsonl

if TYPE_CHECKING:  # the command line reads the defaults below without loading torch
    from mot_core.loading import LoadedModel

PROMPTS = (
    "Chapter One\n\nThe rain had not stopped for three days when",
    "CHAPTER II.\n\nIt was late in the autumn of that year, and the house on the hill",
    "My grandmother never spoke of the war, but on the evening she died she called me to her bed and",
    '"You cannot be serious," said the Colonel, setting down his glass.',
    "Dear Margaret,\n\nI write to you from",
    "June 14th. — Arrived at the village a little after noon. The innkeeper",
    "The history of the town begins in the twelfth century, when",
    "Born in a small farming community, she",
    "In this chapter we examine why",
    "Abstract. We study",
    "The defendant, a merchant of the city, was charged with",
    "Of all the virtues which men have praised, none",
    "The valley lies between two ranges of hills, and the road that crosses it",
    "Once upon a time there lived a king who had three daughters.",
    "The old doctor had practised in the district for forty years, and",
    "It is a common mistake to suppose that",
    "The expedition left the capital in March with",
    "When the train stopped at the frontier, the officer",
    "The committee met on Tuesday to consider the proposal of",
    "Few people today remember the name of",
    "The garden had been neglected since the death of",
    "I.\n\nThe first thing to understand about the family is that",
    "The inspector looked at the body for a long time before he",
    "Among the letters found after his death was one addressed to",
    "The sermon that morning was on the text",
    "To the Editor.\n\nSir, — In your issue of last week",
    "The mill had been in the family for four generations.",
    "She had not seen her brother since the summer of",
    "The instructions were simple enough:",
    "At the edge of the forest stood a cottage where",
    "The professor cleared his throat and began:",
    "Nobody in the regiment liked the new captain.",
)


@dataclass(frozen=True)
class Sampling:
    """What a generated corpus is a function of (with the model's fingerprint): its card."""

    documents: int = 64
    new_tokens: int = 1200
    batch: int = 32
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0

    def card(self, model: LoadedModel) -> dict:
        prompts = hashlib.sha256("\x00".join(PROMPTS).encode()).hexdigest()[:16]
        return {"model": model.name, "fingerprint": model.fingerprint.id, "prompts_sha256": prompts, **asdict(self)}


def generated_root(model_name: str) -> Path:
    """Under ``$MOT_HOME`` whatever the model is called (a zoo name, a local directory, an HF id)."""
    return data_dir() / "generated" / Path(model_name).name


def generate_documents(
    model: LoadedModel, sampling: Sampling, *, progress: Callable[[int], None] | None = None
) -> list[str]:
    """``sampling.documents`` texts, prompt included, the prompts taken in turn."""
    import torch

    tokenizer = model.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # every row continues from its last token
    texts: list[str] = []
    try:
        for first in range(0, sampling.documents, sampling.batch):
            prompts = [PROMPTS[i % len(PROMPTS)] for i in range(first, min(first + sampling.batch, sampling.documents))]
            batch = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
            generator_seed = sampling.seed * 1_000_003 + first  # a batch's samples depend on its seed alone
            torch.manual_seed(generator_seed)
            with torch.no_grad():
                out = model.model.generate(
                    **batch,
                    do_sample=True,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=0,
                    max_new_tokens=sampling.new_tokens,
                    min_new_tokens=sampling.new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
            new = out[:, batch["input_ids"].shape[1] :]
            for prompt, ids in zip(prompts, new, strict=True):
                texts.append(prompt + tokenizer.decode(ids, skip_special_tokens=True))
            if progress is not None:
                progress(len(prompts))
    finally:
        tokenizer.padding_side = side
    return texts


def write_generated(model: LoadedModel, sampling: Sampling, *, progress: Callable[[int], None] | None = None) -> Path:
    """``generated_root(model)/train.jsonl`` and its ``card.json``; kept when the card matches."""
    root = generated_root(model.name)
    card = sampling.card(model)
    card_path, corpus = root / "card.json", root / "train.jsonl"
    if corpus.exists() and card_path.exists() and json.loads(card_path.read_text()) == card:
        return root
    texts = generate_documents(model, sampling, progress=progress)
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(corpus, ({"prompt": i % len(PROMPTS), "text": text} for i, text in enumerate(texts)))
    card_path.write_text(json.dumps(card, indent=1) + "\n")
    return root
