"""One context through the whole cache path: prefill -> extract -> encode -> decode -> load -> generate.

This is what the service does per request, minus Redis and the translator; the report says
how long each step took and whether the generation matches the model's own plain generation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mot_core import codec
from mot_core.cache_ops import generate_plain, generate_with_model_cache, prefill, to_model_cache
from mot_core.loading import LoadedModel

DEMO_TEXT_PATH = Path(__file__).resolve().parent.parent / "data" / "demo" / "lincoln-1864.txt"
DEFAULT_PROMPT = "\n\nIn summary, the most important point of this message is"


def demo_text() -> str:
    return DEMO_TEXT_PATH.read_text(encoding="utf-8")


def context_token_ids(lm: LoadedModel, text: str, max_tokens: int | None = None) -> torch.Tensor:
    """Token ids of ``text`` with the model's own special tokens (BOS where it expects one)."""
    ids = lm.tokenizer(text, add_special_tokens=True, return_tensors="pt")["input_ids"]
    return ids[:, :max_tokens] if max_tokens is not None else ids


def prompt_token_ids(lm: LoadedModel, prompt: str) -> torch.Tensor:
    return lm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]


@dataclass
class RoundTripReport:
    model: str
    context_tokens: int
    dtype: str
    encoded_bytes: int
    generated_text: str
    matching_tokens: int  # leading tokens identical to plain greedy generation
    new_tokens: int
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.matching_tokens == self.new_tokens


def _leading_matches(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.shape[-1], b.shape[-1])
    unequal = (a[0, :n] != b[0, :n]).nonzero()
    return int(unequal[0, 0]) if unequal.numel() else n


def run_round_trip(
    lm: LoadedModel,
    context: str,
    prompt: str = DEFAULT_PROMPT,
    *,
    max_context_tokens: int | None = 512,
    dtype: str = "bfloat16",
    max_new_tokens: int = 32,
) -> RoundTripReport:
    ids = context_token_ids(lm, context, max_context_tokens)
    suffix = prompt_token_ids(lm, prompt)
    timings: dict[str, float] = {}

    def timed(step: str, fn, *args, **kwargs):
        started = time.perf_counter()
        result = fn(*args, **kwargs)
        timings[step] = time.perf_counter() - started
        return result

    cache, _ = timed("prefill+extract", prefill, lm, ids)
    blob = timed("encode", codec.encode, cache, dtype)
    decoded = timed("decode", codec.decode, blob, expected_fingerprint=lm.fingerprint.id)
    model_cache = timed("load", to_model_cache, lm, decoded)
    generated = timed(
        "generate", generate_with_model_cache, lm, model_cache, decoded.token_ids, suffix, max_new_tokens=max_new_tokens
    )
    reference = timed(
        "plain generate (reference)",
        generate_plain,
        lm,
        torch.cat((ids, suffix), dim=-1),
        max_new_tokens=max_new_tokens,
    )
    return RoundTripReport(
        model=lm.name,
        context_tokens=ids.shape[-1],
        dtype=dtype,
        encoded_bytes=len(blob),
        generated_text=lm.tokenizer.decode(generated[0], skip_special_tokens=True),
        matching_tokens=_leading_matches(generated, reference),
        new_tokens=reference.shape[-1],
        timings_s=timings,
    )
