"""The quality knob: the target recomputes a small fraction of the context itself.

A translated cache is cheap but approximate, and what it gets wrong first is precise content
(names, numbers). Selective recompute, in the manner of CacheBlend (Yao et al., 2024): the target
runs the chosen tokens natively through all its layers, attending over the translated cache of
the rest, and their fresh keys/values replace the translated ones.

Which tokens (``selection``; a translator's card names the one it ships with):

- ``"phrases"``: names and numbers whole. Consecutive words that start with a capital letter or
  a digit ("Nick Drake", "March 3") are one phrase; any other word is a phrase of its own. Phrases
  are ranked like words, by their most surprising token, with ``NAME_BONUS`` added to the tokens
  of capitalised and numeric words: a fact a question asks about is mostly a name, a place, a date
  or an amount, and a target copying it needs all of it. On qa_dev items 100-299 at the same
  operating points (reports/experiments/phrases), QA retention against ``"words"``: Gemma-3 0.562
  against 0.322, Qwen2.5 0.786 against 0.550, NLL retention on validation speeches unchanged.
  Both shipped cards name it. Scripts without case get no bonus and fall back to words.
- ``"words"`` (the default of cards that name none): whole words, the most surprising first, by
  the surprisal of their most surprising token (below). A surprising name is surprising in its
  first token only ("Leonardo" and not "da Vinci"), but a target copying it needs all of them.
  Tokens without a letter or digit (spaces, punctuation) come last. On 100 context-conflict QA
  items not used by ``mot eval`` (qa_dev items 100-199, reports/experiments/selection), QA
  retention at 10% recomputed against ``"surprisal"``: Qwen2.5 0.574 against 0.485, Gemma-3 0.462
  against 0.292.
- ``"surprisal"``: the tokens the source model found least predictable when it read the
  context (``KVCache.surprisal``, carried over from the source prefill): names, numbers, a fact
  that contradicts what a model would expect. A translated cache keeps the gist, which is what a
  language model predicts anyway; what it loses is exactly the unpredictable. On 100
  context-conflict QA items (reports/eval-surprisal), QA accuracy with ``"surprisal"`` against
  ``"error"``: Gemma-3 at 20% recomputed 0.69 against 0.52 (native 0.97, no context 0.31),
  Qwen2.5 at 10% 0.57 against 0.46 (native 1.00, no context 0.43).
- ``"error"``: the tokens the translator gets most wrong, by its error where the truth is free:
  layer 0's keys/values depend on each token alone, so the target computes them exactly for every
  token for the price of one layer (``cache_ops.first_layer_kv``). The exact layer 0 is not kept
  for the other tokens unless asked (``exact_first_layer``): on Gemma-3 at 1024 tokens it lowered
  NLL retention (0.21 against 0.35 for the plain translation).
- ``"random"``: the ablation.

Part of the budget can go to the context's last tokens instead (``recent``, a share of the
context; the card's ``recompute_recent``). A continuation leans most on the text just before it,
and recomputing that text moves NLL retention far more than any selection of words does; a
question leans on the facts wherever they are, which the words carry, so the share trades one
for the other at the same cost. On held-out tuning data (reports/experiments/selection/
recent_probe.py), moving 2% of the context out of Qwen2.5's 15% word budget raised its NLL
retention from 0.900 to 0.978 and lowered QA retention from 0.663 to 0.641 (300 items); moving 3%
out of Gemma-3's 10% raised NLL retention from 0.690 to 0.903 and lowered QA retention from 0.462
to 0.308.

Another share can go to the positions the context's end reads (``attended``, the card's
``recompute_attended``): the positions the context's last tokens attended to most when the source
model read it (``KVCache.tail_attention``, recorded in the source prefill and carried over like the
surprisal; the observation window of SnapKV, Li et al., 2024). What a context's end reads is what
its continuation will read, and out of the training register the translated rows are wrong nearly
everywhere: these are the rows worth getting right. The observation costs the target nothing (the
source has read the context anyway); it picks 4 in 10 of the positions the target's own tail would
read over the translated cache, a pass that costs ~0.05x of a prefill, and buys most of what those
buy. On 40 samples of a novel, 3% of the context on top of the shipped operating points: Gemma-3
retention 0.708 -> 0.794, Qwen2.5 0.808 -> 0.876 (reports/experiments/attended-recompute).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

import torch

from mot_core.cache_ops import first_layer_kv, recompute_positions, replace_head
from mot_core.kv_cache import KVCache
from mot_core.loading import LoadedModel

SELECTIONS = ("phrases", "words", "surprisal", "error", "random")
DEFAULT_SELECTION = "words"
GROUPED = ("phrases", "words")  # selections that take whole groups of tokens (select_positions(words=...))
NAME_BONUS = 3.0  # surprisal (nats) added to the tokens of capitalised and numeric words by "phrases"
SHARE_TOLERANCE = 1e-9  # shares that sum to the fraction in decimal may not in binary (0.02 + 0.1 > 0.12)


@dataclass(frozen=True)
class OperatingPoint:
    """A setting of the quality knob: ``fraction`` of the context's tokens the target recomputes
    itself over a translated cache (``blend``); of them, the context's last ``recent`` (a share of
    the context) and the ``attended`` share its last tokens read most (``KVCache.tail_attention``);
    the rest chosen by ``selection``. A translator's card names the one it ships with
    (``TranslatorCard.operating_point``)."""

    fraction: float
    selection: str = DEFAULT_SELECTION
    recent: float = 0.0
    attended: float = 0.0

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ValueError(f"unknown selection {self.selection!r}; choose from {SELECTIONS}")
        if not (
            min(self.recent, self.attended) >= 0.0
            and self.fraction <= 1.0
            and self.recent + self.attended <= self.fraction + SHARE_TOLERANCE
        ):
            raise ValueError(
                f"need recent and attended shares >= 0, their sum <= fraction <= 1; got recent {self.recent}, "
                f"attended {self.attended}, fraction {self.fraction}"
            )

    @property
    def label(self) -> str:
        """``phrases0.1r0.03`` (``a0.03`` appended for an attended share): names what a blended cache
        was made with, in the keys it is stored under."""
        attended = f"a{self.attended:g}" if self.attended else ""
        return f"{self.selection}{self.fraction:g}r{self.recent:g}{attended}"


def word_index(tokenizer, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token ``[T]``: the index of the word it belongs to, and whether it holds a letter or digit.

    A word starts at a token that begins with a space or any other non-alphanumeric character, or
    that follows a token ending with one ("Leon|ardo" is one word, " da" the next). From the
    decoded pieces, so it holds for byte-level BPE and SentencePiece tokenizers alike.
    """
    return _word_index(token_pieces(tokenizer, token_ids))


_PIECES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {token id: its text alone}


def token_pieces(tokenizer, token_ids: torch.Tensor) -> list[str]:
    """Each token decoded on its own. A token's text alone is a function of the token, so each
    tokenizer's are remembered as they are met: decoding a 1024-token context one token at a time
    took ~4 ms a request (0.004x of Gemma-3's prefill on a CPU), for the same strings each time."""
    known = _PIECES.setdefault(tokenizer, {})
    ids = [int(t) for t in token_ids]
    new = sorted(set(ids).difference(known))
    if new:
        known.update(zip(new, tokenizer.batch_decode([[i] for i in new]), strict=True))
    return [known[i] for i in ids]


def _word_index(pieces: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``word_index`` from the decoded pieces (one decode serves ``phrase_index`` too)."""
    starts = [
        i == 0 or not piece[:1].isalnum() or not previous[-1:].isalnum()
        for i, (previous, piece) in enumerate(zip(["", *pieces], pieces, strict=False))
    ]
    alphanumeric = torch.tensor([any(c.isalnum() for c in piece) for piece in pieces])
    return torch.tensor(starts).cumsum(0) - 1, alphanumeric


def phrase_index(tokenizer, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token ``[T]``: the index of the phrase it belongs to, whether it holds a letter or digit,
    and whether its word is name-like (starts with a capital letter or a digit).

    A phrase is a run of name-like words ("Nick Drake", "March 3"), with the bare spaces between
    them (some tokenizers cut a space off as a token of its own); any other word (``word_index``)
    is a phrase on its own. Punctuation ends a run.
    """
    pieces = token_pieces(tokenizer, token_ids)
    words, alphanumeric = _word_index(pieces)
    text_of_word = [""] * (int(words.max()) + 1)
    for w, piece in zip(words.tolist(), pieces, strict=True):
        text_of_word[w] += piece
    texts = [t.strip() for t in text_of_word]
    name_like = [bool(t) and (t[0].isupper() or t[0].isdigit()) for t in texts]
    before, after = _nearest_non_blank(texts, name_like), _nearest_non_blank(texts[::-1], name_like[::-1])[::-1]
    # a word joins the phrase before it if the nearest non-blank word before it is name-like, and so
    # is the word itself (a bare space: the nearest non-blank word after it)
    starts = torch.tensor([not (before[w] and (name_like[w] if texts[w] else after[w])) for w in range(len(texts))])
    phrase_of_word = starts.cumsum(0) - 1
    return phrase_of_word[words], alphanumeric, torch.tensor(name_like)[words] & alphanumeric


def _nearest_non_blank(texts: list[str], flags: list[bool]) -> list[bool]:
    """Per word, the flag of the nearest word before it with any text (False if none)."""
    out, last = [], False
    for text, flag in zip(texts, flags, strict=True):
        out.append(last)
        if text:
            last = flag
    return out


def layer0_error(cache: KVCache, native_keys: torch.Tensor, native_values: torch.Tensor) -> torch.Tensor:
    """Relative squared error of the cached layer 0 per position ``[T]`` (post-RoPE: rotations keep norms)."""
    k, v = cache.keys[0][0].float(), cache.values[0][0].float()  # [H, T, D]
    nk, nv = native_keys[0].float().to(k.device), native_values[0].float().to(v.device)
    error = (k - nk).pow(2).sum((0, 2)) + (v - nv).pow(2).sum((0, 2))
    return error / (nk.pow(2).sum((0, 2)) + nv.pow(2).sum((0, 2))).clamp_min(1e-12)


def select_positions(
    scores: torch.Tensor,
    fraction: float,
    *,
    selection: str = "surprisal",
    seed: int = 0,
    words: torch.Tensor | None = None,
    recent: float = 0.0,
) -> torch.Tensor:
    """Positions to recompute: ``round(fraction * T)`` of ``1..T-1`` (position 0 is the native head).

    ``recent`` of the context (a fraction of ``T``, part of ``fraction``) is its last tokens; the
    rest are the highest ``scores [T]`` before them (random ones for ``selection="random"``).
    ``selection="words"`` and ``"phrases"`` take whole groups of tokens (``words [T]``, the group
    index per token from ``word_index`` or ``phrase_index``), the group with the highest-scoring
    token first, in text order within a group; the last one may be cut short so that every
    selection recomputes the same number of tokens.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}; choose from {SELECTIONS}")
    if (selection in GROUPED) != (words is not None):
        raise ValueError("the words and phrases selections, and only they, take the word index (word_index)")
    if not (0.0 <= recent <= fraction + SHARE_TOLERANCE and fraction <= 1.0):
        raise ValueError(f"need 0 <= recent <= fraction <= 1, got recent={recent}, fraction={fraction}")
    length = scores.numel()
    count = min(round(fraction * length), length - 1)
    tail = min(round(recent * length), count)
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    head = length - tail  # positions 0..head-1 are chosen by score
    chosen = _by_score(scores[:head], count - tail, selection, seed, None if words is None else words[:head])
    return torch.cat(((chosen + 1).sort().values, torch.arange(head, length)))


def _by_score(scores: torch.Tensor, count: int, selection: str, seed: int, words: torch.Tensor | None) -> torch.Tensor:
    """Indices into ``scores[1:]`` of the ``count`` positions ``select_positions`` picks by score."""
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    if selection == "random":
        return torch.randperm(scores.numel() - 1, generator=torch.Generator().manual_seed(seed))[:count]
    if selection in GROUPED:
        best = torch.full((int(words.max()) + 1,), -torch.inf).scatter_reduce(0, words, scores.float(), "amax")
        rank = torch.empty_like(words)
        rank[best.argsort(descending=True, stable=True)] = torch.arange(best.numel())
        order = rank[words] * scores.numel() + torch.arange(scores.numel())  # best word first, then text order
        return order[1:].argsort()[:count]
    return scores[1:].topk(count).indices


def blend(
    target: LoadedModel,
    cache: KVCache,
    point: OperatingPoint,
    *,
    seed: int = 0,
    exact_first_layer: bool = False,
    grad: bool = False,
) -> KVCache:
    """``point.fraction`` of the tokens recomputed natively over the rest of the translated
    ``cache``: the last ``point.recent`` of the context, the ``point.attended`` share its last tokens
    read most (``cache.tail_attention``), and the rest by ``point.selection`` (``select_positions``).

    Position 0 (the head: BOS or the context's first token, the attention sink) is recomputed in
    the same pass, on top of the budget: it attends only to itself, so its rows come out the
    target's own, as ``cache_ops.replace_head`` makes them, for one more row here instead of a pass
    over every weight for one token there (for a model without a BOS, whose head is new with each
    context, that pass is ~0.03x of a prefill on a CPU). Callers need not put the head in first.

    ``cache`` holds every position in every layer (``all_positions``); the result has the same
    layout (``to_model_cache`` or ``trim_to_windows`` drop what sliding layers do not keep).
    ``selection="phrases"``, ``"words"`` and ``"surprisal"`` need ``cache.surprisal``, an attended
    share ``cache.tail_attention`` (the source prefill's, ``prefill(for_targets=True)``). ``grad``:
    differentiable in the cache (``recompute_positions``).
    """
    fraction, selection, recent, attended = point.fraction, point.selection, point.recent, point.attended
    by_surprisal = selection in (*GROUPED, "surprisal")
    if by_surprisal and cache.surprisal is None:
        raise ValueError(f"{selection} selection needs the source's per-token surprisal in the cache")
    if attended and cache.tail_attention is None:
        raise ValueError("an attended share needs the source's tail attention in the cache")
    scores = cache.surprisal[0] if by_surprisal else torch.zeros(cache.seq_len)
    words = None
    if selection == "words":
        words, alphanumeric = word_index(target.tokenizer, cache.token_ids[0])
        scores = scores.masked_fill(~alphanumeric, -1.0)  # surprisal >= 0: spaces and punctuation last
    elif selection == "phrases":
        words, alphanumeric, name_like = phrase_index(target.tokenizer, cache.token_ids[0])
        scores = (scores + NAME_BONUS * name_like).masked_fill(~alphanumeric, -1.0)
    if selection == "error" or exact_first_layer:
        native_keys, native_values = first_layer_kv(target, cache.token_ids)
        if selection == "error":
            scores = layer0_error(cache, native_keys, native_values)
        if exact_first_layer:
            keys, values = list(cache.keys), list(cache.values)
            keys[0], values[0] = native_keys.to(keys[0].dtype).cpu(), native_values.to(values[0].dtype).cpu()
            cache = replace(cache, keys=keys, values=values)
    positions = select_positions(
        scores, fraction - attended, selection=selection, seed=seed, words=words, recent=recent
    )
    if attended:
        count = min(round(fraction * cache.seq_len), cache.seq_len - 1) - positions.numel()
        positions = torch.cat((positions, most_attended(cache.tail_attention[0], count, taken=positions)))
    head = torch.zeros(1, dtype=torch.long)
    return recompute_positions(target, cache, torch.cat((head, positions)), grad=grad)


def with_native_rows(target: LoadedModel, cache: KVCache, point: OperatingPoint | None) -> KVCache:
    """A translated ``cache`` with the rows the target computes itself: for pure translation
    (``point`` None) its head alone (``cache_ops.replace_head``), at an operating point the point's
    recompute (``blend``, which recomputes the head in the same pass). The one place that choice is
    made, so serving, warm-up and the timed evaluation load the same cache."""
    return replace_head(target, cache) if point is None else blend(target, cache, point)


def most_attended(tail_attention: torch.Tensor, count: int, *, taken: torch.Tensor) -> torch.Tensor:
    """The ``count`` positions (position 0 and ``taken`` aside) with the most ``tail_attention [T]``."""
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    shares = tail_attention.clone()
    shares[0] = -torch.inf
    shares[taken] = -torch.inf
    return shares.topk(min(count, shares.numel() - 1 - taken.numel())).indices
