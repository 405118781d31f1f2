"""Character-span alignment between two tokenisations of the same text.

A source model and a target model cut the same text into different tokens. To translate the
source KV cache into the target's cache space, every target position needs to know which source
positions hold "its" text. We answer that through characters: each token gets the half-open
character span ``[start, end)`` it covers in the text, and a target token's weight on a source
token is the number of characters the two spans share, normalised per target row.

The *causal* variant never lets a target position draw on a source token that ends after the
target token ends, because a target position must not see text its own model has not read yet
(the source token's keys/values already mix in the characters past that end).

Span conventions (what :func:`token_spans` guarantees and the weight functions rely on for speed):

* spans are clamped to ``[0, len(text)]`` with ``start <= end``;
* spans of one tokenisation never overlap and are monotone: ``end[i] <= start[i + 1]``;
* the non-empty spans tile the text from 0 without gaps (trailing whitespace that no token
  claims may stay uncovered), so every non-whitespace character belongs to exactly one token;
* tokens that cover no complete character get an empty span ``(p, p)`` at the end of the token
  before them: template special tokens (BOS, EOS, ...), whitespace tokens that ``trim_offsets``
  emptied, and the leading byte tokens of a character that byte-level BPE or byte fallback split
  over several tokens (see ``_normalise``).

The weight functions accept any spans (overlapping or unsorted too); monotone input just makes
the candidate search exactly as large as the number of nonzero weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tokenizers
import torch

Span = tuple[int, int]
SpanLike = Sequence[Sequence[int]] | np.ndarray | torch.Tensor
Coo = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # rows, cols (int64), values (float32)


# --------------------------------------------------------------------------------------------
# Tokenisation with spans
# --------------------------------------------------------------------------------------------


def token_spans(tokenizer: Any, text: str, *, add_special_tokens: bool = True) -> tuple[list[int], list[Span]]:
    """Token ids of ``text`` and the character span of each token, normalised for alignment.

    Accepts a Hugging Face *fast* tokenizer (``PreTrainedTokenizerFast`` or anything with
    ``is_fast``) or a raw ``tokenizers.Tokenizer``: only those report character offsets. Special
    tokens inserted by the post-processor (BOS, EOS) get an empty span; special-token *text* that
    appears literally in ``text`` (say ``"<bos>"``) and is matched as that token keeps its real
    span, because it does stand for those characters. See ``_normalise`` for how raw offsets are
    clamped and made monotone.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    ids, offsets = _encode_with_offsets(tokenizer, text, add_special_tokens)
    return ids, _normalise(offsets, text)


def _encode_with_offsets(tokenizer: Any, text: str, add_special_tokens: bool) -> tuple[list[int], list[Span]]:
    if isinstance(tokenizer, tokenizers.Tokenizer):  # what a bare tokenizer.json loads into
        enc = tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(enc.ids), list(enc.offsets)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is not a fast (Rust `tokenizers`) tokenizer, so it cannot report "
            "character offsets; load it with AutoTokenizer.from_pretrained(..., use_fast=True) or from a "
            "tokenizer.json"
        )
    enc = tokenizer(
        text,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_attention_mask=False,
        truncation=False,
        padding=False,
        verbose=False,
    )
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    if len(offsets) != len(ids):
        raise ValueError(f"tokenizer returned {len(offsets)} offsets for {len(ids)} ids")
    return ids, offsets


def _normalise(offsets: Sequence[Sequence[int]], text: str) -> list[Span]:
    """Turn raw tokenizer offsets into clamped, monotone, non-overlapping spans.

    Raw offsets are messier than they look:

    * byte-level BPE (GPT-2, SmolLM2, Qwen) and SentencePiece byte fallback (Gemma, Llama) split
      a character that is not in the vocabulary into 2-4 byte tokens, and every one of them
      reports the *same* span; a token may also end with the first bytes of a character whose
      remaining bytes come in the next token, so the two spans overlap by that character;
    * Metaspace tokenisers emit a standalone ``▁`` whose span is the first character of the word
      that follows, the same span as the next token; NFKC can map one character (``ﬁ``) to
      several tokens the same way;
    * NFC/NFKC normalisers (Qwen, T5) compose ``e`` + U+0301 into one ``é`` whose offsets cover
      only the ``e``, leaving the combining mark in no token's span; ``trim_offsets`` leaves
      whitespace out of every span (a whitespace-only token gets an empty one);
    * post-processor specials report ``(0, 0)`` wherever they sit.

    Rule 1 (overlaps): a character belongs to the *last* token whose raw span contains it, since
    that token completes it (earlier ones hold a partial byte sequence or a marker). Walking right
    to left, each token's end is cut to the start of the token after it. Tokens left without
    characters become empty. Aligning a tokenisation with itself is then the identity on every
    token that holds a character, and a causal alignment never counts a partial character as read.

    Rule 2 (gaps): characters between two tokens' spans are given to a neighbour so that no
    character is lost: a gap's leading run of non-whitespace (a mark composed into the token
    before) extends the previous token, the rest (from its first whitespace on: trimmed spaces,
    which the following token has read) extends the next token's start back. A leading gap goes
    to the first token; in a trailing gap only non-whitespace extends the last token, because
    trailing whitespace may sit in a token that comes after it (a trimmed ``Ġ``). Either way a
    token never claims characters that come after what its model has read, except a removed or
    composed character right behind it.

    Rule 3 (empty tokens): a token with no characters (specials, trimmed whitespace, the partial
    byte tokens of rule 1) gets an empty span at the end of the token before it (BOS at 0, a
    trailing EOS at the end of the text): where it sits in the stream, never later, so it cannot
    make a causal row read ahead. Empty raw spans take no part in rule 1, so a ``(0, 0)`` EOS
    cannot cut the spans before it.
    """
    n_chars = len(text)
    count = len(offsets)
    spans: list[Span | None] = [None] * count  # None: no characters, placed by rule 3
    limit = n_chars
    for i in range(count - 1, -1, -1):  # rule 1
        start, end = offsets[i]
        start, end = min(max(int(start), 0), n_chars), min(max(int(end), 0), n_chars, limit)
        if start < end:
            spans[i] = (start, end)
            limit = start

    prev: int | None = None  # rule 2
    covered = 0
    for i in range(count):
        span = spans[i]
        if span is None:
            continue
        start, end = span
        if start > covered:
            cut = covered
            if prev is not None:
                while cut < start and not text[cut].isspace():
                    cut += 1
                spans[prev] = (spans[prev][0], cut)  # type: ignore[index]
            spans[i] = (cut, end)
        prev, covered = i, end
    if prev is not None and covered < n_chars:
        tail = [k for k in range(covered, n_chars) if not text[k].isspace()]
        if tail:
            spans[prev] = (spans[prev][0], tail[-1] + 1)  # type: ignore[index]

    out: list[Span] = []  # rule 3
    cursor = 0
    for span in spans:
        if span is None:
            out.append((cursor, cursor))
        else:
            out.append(span)
            cursor = span[1]
    return out


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def _span_array(spans: SpanLike, name: str) -> np.ndarray:
    if isinstance(spans, torch.Tensor):
        spans = spans.detach().cpu().numpy()
    arr = np.asarray(spans, dtype=np.int64)
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must be a sequence of (start, end) pairs, got shape {arr.shape}")
    if (arr < 0).any() or (arr[:, 0] > arr[:, 1]).any():
        raise ValueError(f"{name} must satisfy 0 <= start <= end for every span")
    return arr


def _overlap_pairs(tgt: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (target, source, shared chars) triples with a positive overlap, in target order.

    Sources are sorted by start and paired with a running maximum of their ends; for a target
    ``[a, b)`` the only candidates are then the contiguous run of sources with ``start < b`` and
    ``running max end > a``, found with two binary searches (vectorised over all targets). For
    monotone, non-overlapping spans the run is exactly the overlapping sources, so the work is
    O((T_t + T_s) log T_s + nnz) without any per-pair Python loop.
    """
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    src_idx = np.flatnonzero(src[:, 1] > src[:, 0])
    tgt_idx = np.flatnonzero(tgt[:, 1] > tgt[:, 0])
    if src_idx.size == 0 or tgt_idx.size == 0:
        return empty
    order = src_idx[np.argsort(src[src_idx, 0], kind="stable")]
    s_start, s_end = src[order, 0], src[order, 1]
    s_end_max = np.maximum.accumulate(s_end)
    a, b = tgt[tgt_idx, 0], tgt[tgt_idx, 1]
    hi = np.searchsorted(s_start, b, side="left")  # sources [0, hi) start before b
    lo = np.searchsorted(s_end_max, a, side="right")  # sources [lo, ...) may end after a
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if total == 0:
        return empty
    rows = np.repeat(tgt_idx, counts)
    run_first = np.cumsum(counts) - counts
    pos = np.arange(total) - np.repeat(run_first, counts) + np.repeat(lo, counts)
    shared = np.minimum(tgt[rows, 1], s_end[pos]) - np.maximum(tgt[rows, 0], s_start[pos])
    keep = shared > 0
    return rows[keep], order[pos[keep]], shared[keep]


def sparse_overlap_weights(target_spans: SpanLike, source_spans: SpanLike, *, causal: bool = False) -> Coo:
    """The nonzero weights as COO triples ``(rows, cols, values)``, sorted by row, then column.

    ``rows``/``cols`` are int64, ``values`` float32; each row's values sum to 1. This is what
    :func:`overlap_weights` and :func:`causal_overlap_weights` densify; use it directly to mix
    source states with ``index_add_`` instead of a dense ``[T_t, T_s]`` matmul.
    """
    tgt = _span_array(target_spans, "target_spans")
    src = _span_array(source_spans, "source_spans")
    rows, cols, shared = _overlap_pairs(tgt, src)
    if causal:
        allowed = src[cols, 1] <= tgt[rows, 1]
        rows, cols, shared = rows[allowed], cols[allowed], shared[allowed]
        rows, cols, shared = _add_causal_fallback(tgt, src, rows, cols, shared)
    order = np.lexsort((cols, rows))  # row-major, as a coalesced sparse tensor needs
    rows, cols, shared = rows[order], cols[order], shared[order]
    sums = np.bincount(rows, weights=shared, minlength=len(tgt))
    values = shared / sums[rows]
    return (
        torch.from_numpy(rows.astype(np.int64)),
        torch.from_numpy(cols.astype(np.int64)),
        torch.from_numpy(values.astype(np.float32)),
    )


def _add_causal_fallback(
    tgt: np.ndarray, src: np.ndarray, rows: np.ndarray, cols: np.ndarray, shared: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows with no allowed overlap get weight 1 on the latest non-empty source ending by their end.

    "Latest" is the largest end, ties going to the highest index; with monotone spans that is
    simply the last complete source token before the target's end: the most recent source state
    that has read nothing the target has not.
    """
    covered = np.zeros(len(tgt), dtype=bool)
    covered[rows] = True
    missing = np.flatnonzero(~covered)
    src_idx = np.flatnonzero(src[:, 1] > src[:, 0])
    if missing.size == 0 or src_idx.size == 0:
        return rows, cols, shared
    by_end = src_idx[np.lexsort((src_idx, src[src_idx, 1]))]
    last = np.searchsorted(src[by_end, 1], tgt[missing, 1], side="right") - 1
    ok = last >= 0
    rows = np.concatenate([rows, missing[ok]])
    cols = np.concatenate([cols, by_end[last[ok]]])
    shared = np.concatenate([shared, np.ones(int(ok.sum()), dtype=shared.dtype)])
    return rows, cols, shared


def _dense(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    # numpy's zeros come from calloc, so untouched pages cost nothing until used; torch.zeros
    # writes all 16 MB of a 2048 x 2048 matrix up front (~4-12 ms, most of align()'s time).
    flat = np.zeros(shape[0] * shape[1], dtype=np.float32)
    flat[(rows * shape[1] + cols).numpy()] = values.numpy()
    return torch.from_numpy(flat).view(shape)


def overlap_weights(target_spans: SpanLike, source_spans: SpanLike) -> torch.Tensor:
    """``[T_target, T_source]`` float32: shared characters per pair, each row normalised to sum 1.

    Rows of target tokens with an empty span, or that share no character with any source token,
    are all zeros. Not causal: a target token may draw on a source token that runs past its end.
    """
    rows, cols, values = sparse_overlap_weights(target_spans, source_spans, causal=False)
    return _dense(rows, cols, values, (len(target_spans), len(source_spans)))


def causal_overlap_weights(target_spans: SpanLike, source_spans: SpanLike) -> torch.Tensor:
    """Like :func:`overlap_weights`, but a target token only uses sources ending by its own end.

    Weight = shared characters among the allowed (``source_end <= target_end``) source tokens.
    When none of them shares a character (the target's characters all sit in a source token that
    runs past its end, or the target span is empty), the row puts weight 1 on the latest allowed
    non-empty source token, the most recent complete source information; if there is none (a
    BOS at position 0), the row is all zeros. Empty-span (special) source tokens are never used.
    """
    rows, cols, values = sparse_overlap_weights(target_spans, source_spans, causal=True)
    return _dense(rows, cols, values, (len(target_spans), len(source_spans)))


# --------------------------------------------------------------------------------------------
# One call for the translator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # eq on tensors is ambiguous; compare fields yourself
class Alignment:
    """Both tokenisations of one text and the target-by-source weights between them."""

    source_ids: list[int]
    target_ids: list[int]
    source_spans: list[Span]
    target_spans: list[Span]
    weights: torch.Tensor  # [T_target, T_source] float32, rows sum to 1 or are all zero
    causal: bool = True
    # The same weights as sorted COO triples (rows, cols, values), kept so the sparse and index
    # forms cost nothing to produce.
    coo: Coo | None = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.coo is None:
            nz = self.weights.nonzero(as_tuple=True)
            object.__setattr__(self, "coo", (nz[0], nz[1], self.weights[nz]))

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.target_ids), len(self.source_ids))

    def to_sparse(self) -> torch.Tensor:
        """The weights as a coalesced sparse COO tensor of shape ``[T_target, T_source]``."""
        rows, cols, values = self.coo
        return torch.sparse_coo_tensor(
            torch.stack([rows, cols]), values, self.shape, is_coalesced=True, check_invariants=False
        )

    def overlap_max(self, source_values: torch.Tensor) -> torch.Tensor:
        """Per target token, the largest of ``source_values [T_source]`` over the source tokens that
        share a character with it (0 where none does, as for a BOS).

        Whole overlaps, not the causal weights: this picks which tokens the target recomputes
        itself (exactly), it is never a translator input, so it may see a source token that ends
        past the target token's end.
        """
        rows, cols, _ = sparse_overlap_weights(self.target_spans, self.source_spans, causal=False)
        out = torch.zeros(len(self.target_ids), dtype=torch.float32)
        return out.scatter_reduce(0, rows, source_values.float().cpu()[cols], reduce="amax", include_self=True)

    def row_index(self) -> list[list[tuple[int, float]]]:
        """For each target token, its ``(source index, weight)`` pairs (empty for a zero row)."""
        rows, cols, values = (t.tolist() for t in self.coo)
        out: list[list[tuple[int, float]]] = [[] for _ in range(len(self.target_ids))]
        for r, c, v in zip(rows, cols, values, strict=True):
            out[r].append((c, v))
        return out


def align(
    source_tokenizer: Any,
    target_tokenizer: Any,
    text: str,
    *,
    causal: bool = True,
    add_special_tokens: bool = True,
) -> Alignment:
    """Tokenise ``text`` with both tokenizers and weight each target token over source tokens."""
    source_ids, source_spans = token_spans(source_tokenizer, text, add_special_tokens=add_special_tokens)
    target_ids, target_spans = token_spans(target_tokenizer, text, add_special_tokens=add_special_tokens)
    coo = sparse_overlap_weights(target_spans, source_spans, causal=causal)
    weights = _dense(*coo, (len(target_ids), len(source_ids)))
    return Alignment(source_ids, target_ids, source_spans, target_spans, weights, causal, coo)
