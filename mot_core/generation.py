"""Token-by-token generation and scoring on top of a loaded cache (what the service streams).

``stream_generate`` yields text deltas as tokens are produced (so the first one marks the time
to first token); sampling uses transformers' own logits processors. ``score_continuation``
returns each continuation token's log-probability after the context and prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from mot_core.loading import LoadedModel


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass
class StreamState:
    """Filled in while streaming; read after the iterator is exhausted."""

    generated_tokens: int = 0
    finish_reason: str = ""
    token_ids: list[int] = field(default_factory=list)


def _processors(sampling: Sampling) -> LogitsProcessorList:
    processors = LogitsProcessorList()
    if sampling.temperature > 0:
        processors.append(TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_k > 0:
            processors.append(TopKLogitsWarper(sampling.top_k))
        if 0 < sampling.top_p < 1:
            processors.append(TopPLogitsWarper(sampling.top_p))
    return processors


def _eos_ids(lm: LoadedModel) -> set[int]:
    eos = lm.model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if lm.tokenizer.eos_token_id is not None:
        ids.add(lm.tokenizer.eos_token_id)
    return ids


@torch.inference_mode()
def stream_generate(
    lm: LoadedModel,
    model_cache: DynamicCache,
    suffix_ids: torch.Tensor,
    sampling: Sampling,
    state: StreamState | None = None,
) -> Iterator[str]:
    """Run ``suffix_ids [1, n>=1]`` on top of ``model_cache`` and yield generated text pieces."""
    state = state if state is not None else StreamState()
    if suffix_ids.shape[-1] < 1:
        raise ValueError("need at least one uncached token to generate from")
    generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None
    processors, eos = _processors(sampling), _eos_ids(lm)
    inputs, emitted = suffix_ids.to(lm.device), ""
    state.finish_reason = "length"
    for _ in range(sampling.max_new_tokens):
        logits = lm.model(input_ids=inputs, cache=model_cache, use_cache=True, logits_to_keep=1).logits[:, -1, :]
        logits = logits.float().cpu()
        history = torch.tensor([state.token_ids], dtype=torch.long)
        scores = processors(history, logits)
        if sampling.temperature > 0:
            token = int(torch.multinomial(scores.softmax(-1), 1, generator=generator))
        else:
            token = int(scores.argmax(-1))
        if token in eos:
            state.finish_reason = "eos"
            break
        state.token_ids.append(token)
        state.generated_tokens += 1
        text = lm.tokenizer.decode(state.token_ids, skip_special_tokens=True)
        stop_at = min((i for i in (text.find(s) for s in sampling.stop) if i >= 0), default=-1)
        if stop_at >= 0:
            if stop_at > len(emitted):
                yield text[len(emitted) : stop_at]
            state.finish_reason = "stop"
            return
        if not text.endswith("\ufffd") and len(text) > len(emitted):  # hold back half a UTF-8 character
            yield text[len(emitted) :]
            emitted = text
        inputs = torch.tensor([[token]], device=lm.device)
    text = lm.tokenizer.decode(state.token_ids, skip_special_tokens=True)
    if len(text) > len(emitted):
        yield text[len(emitted) :]


@torch.inference_mode()
def score_continuation(
    lm: LoadedModel,
    model_cache: DynamicCache | None,
    prefix_ids: torch.Tensor,
    continuation_ids: torch.Tensor,
) -> torch.Tensor:
    """Log-probabilities ``[n]`` of ``continuation_ids`` given the cache and ``prefix_ids [1, m>=1]``.

    ``prefix_ids`` are run natively (the uncached end of the context plus the prompt); the last
    prefix token predicts the first continuation token.
    """
    if prefix_ids.shape[-1] < 1:
        raise ValueError("need at least one uncached token before the continuation")
    ids = torch.cat((prefix_ids, continuation_ids), dim=-1).to(lm.device)
    kwargs = {"cache": model_cache, "use_cache": True} if model_cache is not None else {}
    logits = lm.model(input_ids=ids, **kwargs).logits[0].float()
    n = continuation_ids.shape[-1]
    predicting = logits[prefix_ids.shape[-1] - 1 : prefix_ids.shape[-1] - 1 + n]
    return predicting.log_softmax(-1).gather(-1, continuation_ids[0].to(lm.device)[:, None])[:, 0].cpu()
