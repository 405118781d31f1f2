"""Training rows for a (source, target) pair: aligned source rows and the target's own rows.

Shared by every translator's fitting or training: a context is prefilled by both models; the
source rows are aligned causally onto the target's tokens; the target's rows are what a perfect
translator would produce. Contexts must fit inside the target's smallest sliding window so every
position of every layer is available as a training target.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from mot_core.alignment import align
from mot_core.cache_ops import prefill
from mot_core.loading import LoadedModel
from mot_core.translation.features import align_rows, kv_rows
from mot_core.translation.ridge import RidgeFitter, RidgeTranslator
from mot_core.translation.translator import CARD_FILE, TranslatorCard, load_translator

log = logging.getLogger(__name__)

BASELINE_CONTEXT_TOKENS = 256  # the ridge baseline's fitting contexts (the calibration fit)
BASELINE_CHUNKS_PER_DOCUMENT = 2  # so its contexts come from many documents, not a few long ones


@dataclass
class PairRows:
    aligned: torch.Tensor  # [T_t, L_s, F_s]
    target: torch.Tensor  # [T_t, L_t, F_t]


def context_chunks(tokenizer, text: str, tokens: int, *, max_chunks: int | None = None) -> Iterator[str]:
    """Consecutive pieces of ``text`` of about ``tokens`` tokens each, cut at token boundaries."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    count = 0
    for start in range(0, len(offsets) - tokens + 1, tokens):
        piece = text[offsets[start][0] : offsets[start + tokens - 1][1]].strip()
        if piece:
            yield piece
            count += 1
            if max_chunks is not None and count >= max_chunks:
                return


def pair_rows(source: LoadedModel, target: LoadedModel, text: str) -> PairRows:
    alignment = align(source.tokenizer, target.tokenizer, text, causal=True)
    source_cache, _ = prefill(source, alignment.source_ids)
    target_cache, _ = prefill(target, alignment.target_ids)
    aligned = align_rows(kv_rows(source_cache, source.spec), alignment.to_sparse())
    return PairRows(aligned, kv_rows(target_cache, target.spec))


def fit_ridge(
    source: LoadedModel,
    target: LoadedModel,
    contexts: Iterable[str],
    *,
    alpha: float = 1e-2,
    native_tail: int = 0,
    recipe: dict | None = None,
) -> RidgeTranslator:
    """Closed-form fit on ``contexts`` (training text only); position 0 is left to the target."""
    fitter: RidgeFitter | None = None
    for text in tqdm(list(contexts), desc=f"ridge {source.name}->{target.name}", unit="ctx"):
        rows = pair_rows(source, target, text)
        if fitter is None:
            fitter = RidgeFitter(rows.aligned[0].numel(), rows.target[0].numel())
        fitter.add(rows.aligned[1:], rows.target[1:])  # position 0 is computed natively (replace_head)
    if fitter is None:
        raise ValueError("no contexts to fit on")
    weight, x_mean, y_mean = fitter.solve(alpha)
    card = TranslatorCard.for_pair(RidgeTranslator.kind, source, target, native_tail)
    card.recipe = {"alpha": alpha, "rows": fitter.rows, **(recipe or {})}
    translator = RidgeTranslator.from_card(card)
    translator.weight.copy_(weight)
    translator.x_mean.copy_(x_mean)
    translator.y_mean.copy_(y_mean)
    return translator.eval()


def baseline_ridge(
    source: LoadedModel,
    target: LoadedModel,
    train_documents: Callable[[], list[str]],
    *,
    contexts: int,
    native_tail: int,
    directory: Path,
    context_tokens: int = BASELINE_CONTEXT_TOKENS,
) -> RidgeTranslator:
    """The closed-form row of every report: fitted on the first ``contexts`` pieces of the training
    documents, once per machine, and kept in ``directory``. A kept fit is refitted when it was made
    for other models (fingerprints) or another native tail than the translator it is compared with."""
    if (directory / CARD_FILE).is_file():
        kept = load_translator(directory)
        made_for = (kept.card.source_fingerprint, kept.card.target_fingerprint, kept.card.native_tail)
        if made_for == (source.fingerprint.id, target.fingerprint.id, native_tail):
            return kept
        log.info("refitting the ridge baseline in %s: it was fitted for other models or another native tail", directory)
    pieces = (
        piece
        for document in train_documents()
        for piece in context_chunks(source.tokenizer, document, context_tokens, max_chunks=BASELINE_CHUNKS_PER_DOCUMENT)
    )
    chosen = list(itertools.islice(pieces, contexts))
    recipe = {"contexts": len(chosen), "context_tokens": context_tokens, "data": "training split"}
    ridge = fit_ridge(source, target, chosen, native_tail=native_tail, recipe=recipe)
    ridge.save(directory)
    return ridge
