"""Scoring a continuation under a given cache: shared by training (the loss) and evaluation.

Every condition (native, none, translated, deranged, ridge) is scored the same way: the target
gets some cache for the context (or none), then runs the context's last ``native_tail`` tokens
and the continuation itself; the logits that predict the continuation tokens are compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F

from mot_core.alignment import Alignment, align
from mot_core.cache_ops import prefill, to_model_cache
from mot_core.kv_cache import KVCache
from mot_core.loading import LoadedModel
from mot_core.translation.assemble import rows_to_cache
from mot_core.translation.features import align_rows, first_layer_rows, kv_rows
from mot_core.translation.recompute import OperatingPoint, blend
from mot_core.translation.samples import Sample
from mot_core.translation.translator import CacheTranslator, source_notes


@dataclass
class PreparedSample:
    alignment: Alignment
    source_cache: KVCache  # the source's own cache of the context, with its notes for targets
    aligned_rows: torch.Tensor  # [T_t, L_s, F_s] source rows aligned onto target tokens
    target_ids: torch.Tensor  # [1, T_t] target tokens of the context
    continuation_ids: torch.Tensor  # [1, n] target tokens scored
    keep: int  # context tokens held in a cache; the last ``T_t - keep`` are the native tail
    native_cache: KVCache  # the target's own cache of the first ``keep`` tokens (the upper bound)
    native_rows: torch.Tensor | None  # [keep, L_t, F_t] its pre-RoPE rows (None past a sliding window)
    head_rows: torch.Tensor  # [L_t, F_t] the target's own row of position 0 (BOS or first token)
    first_layer_rows: torch.Tensor  # [keep, F_t] the target's own layer-0 rows (exact for any context)

    @property
    def tail_ids(self) -> torch.Tensor:
        return self.target_ids[:, self.keep :]

    @cached_property  # read by every translated and blended cache of the sample (each training step)
    def notes(self) -> dict[str, torch.Tensor | None]:
        """The source's surprisal and tail attention at each target token ``[T_t]`` (``source_notes``,
        as ``CacheTranslator.translate`` maps them)."""
        return source_notes(self.source_cache, self.alignment)

    @property
    def surprisal(self) -> torch.Tensor:
        return self.notes["surprisal"]


@torch.no_grad()
def prepare(
    source: LoadedModel, target: LoadedModel, sample: Sample, continuation_tokens: int, native_tail: int
) -> PreparedSample:
    alignment = align(source.tokenizer, target.tokenizer, sample.context, causal=True)
    source_cache, _ = prefill(source, alignment.source_ids, for_targets=True)
    aligned = align_rows(kv_rows(source_cache, source.spec), alignment.to_sparse())
    target_ids = torch.tensor([alignment.target_ids])
    cont = target.tokenizer(sample.continuation, add_special_tokens=False, return_tensors="pt")["input_ids"]
    cont = cont[:, :continuation_tokens]
    keep = max(1, target_ids.shape[-1] - native_tail)
    native_cache, _ = prefill(target, target_ids[:, :keep])
    windows = [w for w in target.spec.sliding_windows if w is not None]
    native_rows = kv_rows(native_cache, target.spec) if not windows or keep < min(windows) else None
    head_rows = kv_rows(prefill(target, target_ids[:, :1])[0], target.spec)[0]
    first_layer = first_layer_rows(target, target_ids[:, :keep])
    return PreparedSample(
        alignment, source_cache, aligned, target_ids, cont, keep, native_cache, native_rows, head_rows, first_layer
    )


def _first_layer(translator: CacheTranslator, prepared: PreparedSample) -> torch.Tensor | None:
    return prepared.first_layer_rows if translator.reads_first_layer else None


def translated_rows(
    translator: CacheTranslator, prepared: PreparedSample, target: LoadedModel, *, all_positions: bool = False
) -> torch.Tensor:
    """Predicted pre-RoPE rows of the ``keep`` cached tokens, with the native head (position 0) in
    place (differentiable). Sliding-window layers are predicted for the window ending at the last
    cached token (predicting the whole context would leave the native tail's share of it empty).

    Position 0 (BOS, or the first token where there is no BOS) sees only itself, so the target
    computes it natively for the price of one token; it is also the attention sink, which
    a translator must not get wrong.
    """
    aligned, first_layer = prepared.aligned_rows[: prepared.keep], _first_layer(translator, prepared)
    rows = translator.predict_rows(aligned, all_positions=all_positions, first_layer=first_layer)
    return torch.cat((prepared.head_rows[None].to(rows.dtype), rows[1:]), dim=0)


@torch.no_grad()
def translated_cache(
    translator: CacheTranslator,
    prepared: PreparedSample,
    target: LoadedModel,
    point: OperatingPoint | None = None,
) -> KVCache:
    """The context's translated cache; at an operating ``point`` (``OperatingPoint(0.0)`` included)
    blended by the target.

    ``point=None`` is pure translation; a fraction of 0 is the same rows with every position in
    every layer (what a recompute starts from); above 0 the target also recomputes that fraction
    of the tokens natively (``recompute.blend``).
    """
    blended = point is not None
    aligned, first_layer = prepared.aligned_rows[: prepared.keep], _first_layer(translator, prepared)
    rows = translator.inference_rows(aligned, all_positions=blended, first_layer=first_layer)
    rows[0] = prepared.head_rows  # the native head, as in translated_rows
    ids = prepared.target_ids[:, : prepared.keep]
    cache = rows_to_cache(rows, target.spec, ids, target.fingerprint.id, all_positions=blended, **prepared.notes)
    if not blended:
        return cache
    return blend(target, cache, point)


def operating_point_cache(translator: CacheTranslator, prepared: PreparedSample, target: LoadedModel) -> KVCache:
    """What the target loads at the operating point of the translator's card (``translated_cache``)."""
    return translated_cache(translator, prepared, target, translator.card.operating_point)


def rows_model_cache(target: LoadedModel, rows: torch.Tensor, target_ids: torch.Tensor, keep: int):
    cache = rows_to_cache(rows[:keep], target.spec, target_ids[:, :keep], target.fingerprint.id)
    return to_model_cache(target, cache)


def blended_cache(target: LoadedModel, rows: torch.Tensor, prepared: PreparedSample, point: OperatingPoint) -> KVCache:
    """What the target loads at an operating ``point``, differentiable in ``rows`` (from
    ``translated_rows(..., all_positions=True)``): the translated cache with ``point.fraction`` of the
    context recomputed by the target itself (``recompute.blend``). ``to_model_cache`` loads it (as
    often as needed: loading copies nothing the target's forward then changes).

    Training through it teaches the translator what the shipped cache is: the tokens the target
    recomputes need no translation, and the others are read by freshly computed neighbours.
    """
    keep = prepared.keep
    cache = rows_to_cache(
        rows[:keep],
        target.spec,
        prepared.target_ids[:, :keep],
        target.fingerprint.id,
        all_positions=True,
        **prepared.notes,
    )
    return blend(target, cache, point, grad=True)


def continuation_logits(
    target: LoadedModel, model_cache, tail_ids: torch.Tensor, continuation_ids: torch.Tensor
) -> torch.Tensor:
    """Logits ``[n, V]`` predicting each continuation token after the cache and the native tail.

    With no cache, the target sees only its BOS (if it uses one) and the tail.
    """
    prefix = tail_ids
    if model_cache is None and target.spec.prepend_bos:
        prefix = torch.cat((torch.tensor([[target.spec.bos_token_id]]), tail_ids), dim=-1)
    if prefix.shape[-1] < 1:
        raise ValueError("need a native tail of at least one token (or a BOS) before the continuation")
    ids = torch.cat((prefix, continuation_ids[:, :-1]), dim=-1).to(target.device)
    kwargs = {"cache": model_cache, "use_cache": True} if model_cache is not None else {}
    logits = target.model(input_ids=ids, **kwargs).logits[0].float()
    return logits[prefix.shape[-1] - 1 :]


def kl_per_token(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) for each position ``[n]``."""
    log_p = teacher_logits.log_softmax(-1)
    return (log_p.exp() * (log_p - student_logits.log_softmax(-1))).sum(-1)


def nll_per_token(logits: torch.Tensor, continuation_ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, continuation_ids[0].to(logits.device), reduction="none")


def content_weights(
    native_logits: torch.Tensor, none_logits: torch.Tensor, continuation_ids: torch.Tensor, focus: float
) -> torch.Tensor:
    """Per-token loss weights ``[n]`` (mean 1) that favour the tokens the context helps predict.

    The benefit of a token is how much lower the target's NLL is with the native context than with
    none (clamped at 0). ``focus`` 0 weighs every token alike; 1 weighs by benefit alone. Tokens
    the context does not help (function words, the style of the text) carry no content to
    translate, so a translator that fits them learns the training text rather than the context.
    """
    ones = torch.ones(continuation_ids.shape[-1], device=native_logits.device)
    benefit = nll_per_token(none_logits, continuation_ids) - nll_per_token(native_logits, continuation_ids)
    benefit = benefit.clamp_min(0)
    if benefit.mean() <= 0:
        return ones
    return (1 - focus) * ones + focus * benefit / benefit.mean()
