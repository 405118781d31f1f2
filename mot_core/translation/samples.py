"""(context, continuation) samples cut from a corpus, the unit of training and evaluation.

A sample is a context of about ``context_tokens`` source tokens and the text that follows it;
the target scores the first ``continuation_tokens`` of its own tokens of that text. Samples are
cut deterministically (given a seed) from whole documents, so train and validation samples
never share a document.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    context: str
    continuation: str
    document: int  # index of the document it was cut from (for the deranged control)
    register: str = ""  # the corpus it was cut from, where training mixes several (train.foreign_index)


def read_corpus(path: Path) -> list[str]:
    """Documents of a corpus file: a .txt file is one document; a .jsonl file has one per line ("text")."""
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            return [json.loads(line)["text"] for line in fh if line.strip()]
    return [path.read_text(encoding="utf-8")]


def cut_samples(
    documents: list[str],
    tokenizer,
    *,
    context_tokens: int,
    continuation_chars: int = 600,
    count: int,
    seed: int = 0,
    register: str = "",
) -> list[Sample]:
    """Up to ``count`` samples, each from a random position of a random document long enough."""
    rng = random.Random(seed)
    offsets = [tokenizer(d, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"] for d in documents]
    usable = [i for i, o in enumerate(offsets) if len(o) > context_tokens + 8]
    samples: list[Sample] = []
    attempts = 0
    while usable and len(samples) < count and attempts < count * 20:
        attempts += 1
        doc = rng.choice(usable)
        spans = offsets[doc]
        start = rng.randrange(0, len(spans) - context_tokens - 4)
        begin, end = spans[start][0], spans[start + context_tokens - 1][1]
        continuation = documents[doc][end : end + continuation_chars]
        if len(continuation.strip()) < continuation_chars // 3:
            continue
        samples.append(Sample(documents[doc][begin:end], continuation, doc, register))
    return samples


def cut_lengths(
    documents: list[str], tokenizer, lengths: list[int], count: int, *, seed: int = 0, register: str = ""
) -> list[Sample]:
    """``count`` training samples whose context lengths alternate through ``lengths`` (one cut per
    length, seeded ``seed + i``, so a shorter run's samples are a prefix of a longer one's)."""
    per_length = [
        cut_samples(
            documents, tokenizer, context_tokens=n, count=-(-count // len(lengths)), seed=seed + i, register=register
        )
        for i, n in enumerate(lengths)
    ]
    return [s for group in zip(*per_length, strict=False) for s in group][:count]


def interleave(base: list[Sample], extra: list[Sample]) -> list[Sample]:
    """Both lists in one, ``extra`` spread evenly through ``base`` (each keeps its own order), so a
    second corpus is seen throughout training rather than at its end."""
    keyed = [((i + 0.5) / len(base), 0, s) for i, s in enumerate(base)]
    keyed += [((j + 0.5) / len(extra), 1, s) for j, s in enumerate(extra)]
    return [s for *_, s in sorted(keyed, key=lambda k: k[:2])]


def with_recall(samples: list[Sample], fraction: float, *, seed: int = 0) -> list[Sample]:
    """The same samples, ``fraction`` of them turned into recall samples: the continuation repeats a
    passage of the context, starting at a random word.

    Why: on ordinary continuations the target leans on the context's gist, so distillation never
    asks the cache to keep exact tokens; when the text repeats itself the native target copies
    names and numbers out of its cache (induction), and matching it there is what lets facts
    survive translation. The corpus stays the only training data.
    """
    rng = random.Random(seed)
    out = []
    for sample in samples:
        if rng.random() >= fraction:
            out.append(sample)
            continue
        chars = len(sample.continuation)
        words = [i + 1 for i, ch in enumerate(sample.context[: max(1, len(sample.context) - chars // 2)]) if ch == " "]
        start = rng.choice(words) if words else 0
        repeat = "\n" + sample.context[start : start + chars]
        out.append(replace(sample, continuation=repeat))
    return out
