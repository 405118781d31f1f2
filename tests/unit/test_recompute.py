"""Selective recompute on tiny models of the three architectures: exact where it must be."""

import re

import pytest
import torch
from transformers import DynamicCache

from mot_core import cache_ops, recompute_attention
from mot_core.kv_cache import KVCache
from mot_core.translation.recompute import (
    OperatingPoint,
    blend,
    layer0_error,
    phrase_index,
    select_positions,
    token_pieces,
    word_index,
)

TEXT = "In 1790 the President addressed Congress on the state of the Union, the militia and the debt. " * 3


def _full_native_cache(lm, ids) -> KVCache:
    """The target's own cache with every position in every layer (sliding layers untrimmed)."""
    model_cache = DynamicCache()
    with torch.inference_mode():
        lm.model(input_ids=ids, cache=model_cache, use_cache=True)
    return cache_ops.extract(lm, model_cache, ids)


def _corrupt(cache: KVCache, positions: torch.Tensor, seed: int = 0, from_layer: int = 0) -> KVCache:
    gen = torch.Generator().manual_seed(seed)
    keys = [k.clone() for k in cache.keys]
    values = [v.clone() for v in cache.values]
    for k, v in zip(keys[from_layer:], values[from_layer:], strict=True):
        k[:, :, positions] += torch.randn(k[:, :, positions].shape, generator=gen)
        v[:, :, positions] += torch.randn(v[:, :, positions].shape, generator=gen)
    return KVCache(keys, values, cache.token_ids, cache.fingerprint)


def _assert_same_cache(restored: KVCache, native: KVCache) -> None:
    for layer in range(native.num_layers):
        torch.testing.assert_close(restored.keys[layer], native.keys[layer], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(restored.values[layer], native.values[layer], rtol=1e-4, atol=1e-4)


def _ids(lm):
    ids = lm.tokenizer(TEXT, return_tensors="pt").input_ids
    assert ids.shape[-1] > 3 * 8  # well past the tiny Gemma's sliding window of 8
    return ids


def test_first_layer_kv_is_the_prefills_layer_0(tiny_lm):
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    keys, values = cache_ops.first_layer_kv(tiny_lm, ids)
    torch.testing.assert_close(keys, native.keys[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values, native.values[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [32, 2], ids=["one-chunk", "chunks-of-2"])
def test_recomputing_the_corrupted_positions_restores_the_native_cache(tiny_lm, chunk, monkeypatch):
    """Every wrong entry recomputed over an otherwise exact cache gives back the prefill, in every layer.

    This fails if the mask lets a recomputed token see a stale entry, misses its sliding window,
    or puts fresh entries at the wrong positions; with chunks of 2 queries, also if a chunk's keys
    (``recompute_attention``) leave out one its queries see (the tiny Gemma's window is 8).
    """
    monkeypatch.setattr(recompute_attention, "QUERY_CHUNK", chunk)
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    positions = torch.tensor([3, 4, 11, 17, 20, ids.shape[-1] - 2])
    corrupted = _corrupt(native, positions)
    given = [t.clone() for t in (*corrupted.keys, *corrupted.values)]
    restored = cache_ops.recompute_positions(tiny_lm, corrupted, positions)
    _assert_same_cache(restored, native)
    # the fresh rows are written into copies, never into the caller's cache
    assert all(torch.equal(t, g) for t, g in zip((*corrupted.keys, *corrupted.values), given, strict=True))
    partly = cache_ops.recompute_positions(tiny_lm, corrupted, positions[:2])
    assert not torch.allclose(partly.keys[-1][:, :, 11], native.keys[-1][:, :, 11], atol=1e-3)


def test_surprisal_selection_recomputes_the_tokens_the_source_found_surprising(tiny_lm):
    """Entries wrong past layer 0 at the most surprising tokens: the surprisal finds them all (the
    blend is the native cache again); the layer-0 error cannot see them."""
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    surprising = torch.tensor([5, 9, 20])
    corrupted = _corrupt(native, surprising, from_layer=1)
    corrupted.surprisal = torch.zeros(ids.shape)
    corrupted.surprisal[0, surprising] = torch.tensor([3.0, 5.0, 4.0])
    fraction = len(surprising) / ids.shape[-1]
    restored = blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="surprisal"))
    _assert_same_cache(restored, native)
    by_error = blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="error"))
    assert not torch.allclose(by_error.keys[-1], native.keys[-1], atol=1e-3)
    corrupted.surprisal = None
    with pytest.raises(ValueError, match="surprisal"):
        blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="surprisal"))


def test_word_index_groups_tokens_into_the_words_of_the_text(tiny_lm):
    text = "Leonardo da Vinci painted 1503 frescoes in Oswaldtwistle ; the Congress , militia !"
    ids = tiny_lm.tokenizer(text, return_tensors="pt").input_ids[0]
    words, alphanumeric = word_index(tiny_lm.tokenizer, ids)
    assert words.shape == alphanumeric.shape == ids.shape and bool((words.diff() >= 0).all())
    assert int(words.max()) + 1 > len(text.split())  # punctuation and the BOS are words of their own
    pieces = tiny_lm.tokenizer.batch_decode([[int(t)] for t in ids])
    grouped = [
        "".join(p for p, w in zip(pieces, words, strict=True) if w == i).strip() for i in range(int(words.max()) + 1)
    ]
    assert [g for g in grouped[1:] if g] == re.findall(r"\w+|[^\w\s]", text)  # [0] is the BOS
    assert alphanumeric.tolist() == [any(c.isalnum() for c in p) for p in pieces]


def test_phrase_index_joins_names_and_numbers_and_flags_them(tiny_lm):
    text = "the song by Nick Drake , out on March 3 , 2017 in London ; the Beast sang"
    ids = tiny_lm.tokenizer(text, return_tensors="pt").input_ids[0]
    phrases, alphanumeric, name_like = phrase_index(tiny_lm.tokenizer, ids)
    words, word_alphanumeric = word_index(tiny_lm.tokenizer, ids)
    assert torch.equal(alphanumeric, word_alphanumeric) and bool((phrases.diff() >= 0).all())
    pieces = tiny_lm.tokenizer.batch_decode([[int(t)] for t in ids])

    def text_of(index: torch.Tensor) -> list[str]:
        spans = ["".join(p for p, i in zip(pieces, index, strict=True) if i == n) for n in range(int(index.max()) + 1)]
        return [s.strip() for s in spans if s.strip()]

    assert text_of(phrases)[1:] == [  # [0] is the BOS
        *["the", "song", "by", "Nick Drake", ",", "out", "on", "March 3", ",", "2017", "in", "London", ";"],
        *["the", "Beast", "sang"],
    ]
    named_words = torch.where(name_like, words, -1)  # -1: no word of text_of's
    assert text_of(named_words) == ["Nick", "Drake", "March", "3", "2017", "London", "Beast"]
    assert not bool((name_like & ~alphanumeric).any())


def test_phrases_selection_restores_a_whole_name_where_words_restores_its_first_word(tiny_lm):
    """A name's second word is predictable once its first is read; the target needs both."""
    text = TEXT + " Envoys met Oswald Twistleton there."
    encoded = tiny_lm.tokenizer(text, return_tensors="pt", return_offsets_mapping=True)
    ids = encoded.input_ids
    native = _full_native_cache(tiny_lm, ids)
    phrases, _, name_like = phrase_index(tiny_lm.tokenizer, ids[0])
    words, _ = word_index(tiny_lm.tokenizer, ids[0])
    at = text.index("Oswald")
    first = next(i for i, (a, b) in enumerate(encoded.offset_mapping[0].tolist()) if a <= at < b)
    name = (phrases == phrases[first]).nonzero().flatten()
    assert words[name][name_like[name]].unique().numel() == 2  # two words (and any bare space), one phrase
    corrupted = _corrupt(native, name, from_layer=1)
    corrupted.surprisal = torch.full(ids.shape, 2.0)
    corrupted.surprisal[0, name] = 0.1  # predictable ...
    corrupted.surprisal[0, first] = 4.0  # ... but for its first token
    corrupted.surprisal[0, ~name_like & (torch.arange(ids.shape[-1]) > first)] = 3.9  # "there" outranks "Twistleton"
    fraction = name.numel() / ids.shape[-1]
    restored = blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="phrases"))
    _assert_same_cache(restored, native)
    by_words = blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="words"))
    assert not torch.allclose(by_words.keys[-1], native.keys[-1], atol=1e-3)


def test_word_selection_takes_whole_words_best_first_and_keeps_the_budget():
    scores = torch.tensor([9.0, 5.0, 0.0, 0.0, 8.0, 1.0, 0.0, 0.0])
    words = torch.tensor([0, 1, 1, 2, 3, 3, 3, 4])

    def by_words(fraction: float) -> list[int]:
        return select_positions(scores, fraction, selection="words", words=words).tolist()

    assert by_words(0.5) == [1, 4, 5, 6]  # word 1 cut to its first token
    assert by_words(0.75) == [1, 2, 3, 4, 5, 6]
    assert by_words(0.375) == [4, 5, 6]
    assert select_positions(scores, 0.375, selection="surprisal").tolist() == [1, 4, 5]  # single tokens
    with pytest.raises(ValueError, match="word index"):
        select_positions(scores, 0.5, selection="words")  # never single tokens in disguise
    with pytest.raises(ValueError, match="word index"):
        select_positions(scores, 0.5, words=words)


def test_recent_share_takes_the_last_tokens_and_the_rest_by_words():
    """``recent`` moves part of the budget to the end of the context; the total stays the same."""
    scores = torch.tensor([9.0, 5.0, 0.0, 0.0, 8.0, 1.0, 0.0, 0.5])
    words = torch.tensor([0, 1, 1, 2, 3, 3, 3, 4])

    def chosen(fraction: float, recent: float) -> list[int]:
        return select_positions(scores, fraction, selection="words", words=words, recent=recent).tolist()

    assert chosen(0.5, 0.0) == [1, 4, 5, 6]  # word 3 whole, then word 1 cut to its first token
    assert chosen(0.5, 0.25) == [4, 5, 6, 7]  # the last two tokens, then word 3 (what is left of it)
    assert chosen(0.625, 0.125) == [1, 4, 5, 6, 7]  # the last token, word 3, word 1's first token
    assert chosen(0.375, 0.375) == [5, 6, 7]  # all of it from the end
    assert select_positions(scores, 0.375, recent=0.25).tolist() == [4, 6, 7]  # single tokens: 4, then the end
    with pytest.raises(ValueError, match="recent"):
        chosen(0.25, 0.5)  # the recent share is part of the fraction


def test_token_pieces_are_each_token_decoded_alone(tiny_lm):
    """Remembered per tokenizer, and the same as decoding each token on its own, repeats included."""
    ids = _ids(tiny_lm)[0]
    ids = torch.cat((ids, ids[:5]))  # tokens met before, in the same call and the next
    expected = [tiny_lm.tokenizer.decode([int(t)]) for t in ids]
    assert token_pieces(tiny_lm.tokenizer, ids) == expected
    assert token_pieces(tiny_lm.tokenizer, ids) == expected


def test_word_selection_recomputes_whole_surprising_words(tiny_lm):
    """Only the first token of a name is surprising, but the target needs all of it: the word
    selection restores every token of the two most surprising words; the token selection, with
    the same budget, does not."""
    ids = tiny_lm.tokenizer(TEXT + " Envoys of Zorblaxia met Oswaldtwistle.", return_tensors="pt").input_ids
    native = _full_native_cache(tiny_lm, ids)
    words, alphanumeric = word_index(tiny_lm.tokenizer, ids[0])
    long_words = [w for w in words.unique().tolist() if (words == w).sum() >= 2 and alphanumeric[words == w].all()]
    chosen = long_words[-2:]
    assert len(chosen) == 2 and 0 not in words[:1].tolist() or words[0] not in chosen
    positions = torch.cat([(words == w).nonzero().flatten() for w in chosen])
    corrupted = _corrupt(native, positions, from_layer=1)
    corrupted.surprisal = torch.ones(ids.shape)
    corrupted.surprisal[0, positions] = 0.5  # the rest of each word is predictable ...
    for surprise, w in zip((3.0, 4.0), chosen, strict=True):
        corrupted.surprisal[0, (words == w).nonzero()[0]] = surprise  # ... its first token is not
    fraction = positions.numel() / ids.shape[-1]
    restored = blend(tiny_lm, corrupted, OperatingPoint(fraction))
    _assert_same_cache(restored, native)
    by_token = blend(tiny_lm, corrupted, OperatingPoint(fraction, selection="surprisal"))
    assert not torch.allclose(by_token.keys[-1], native.keys[-1], atol=1e-3)


def test_recompute_needs_every_position(tiny_models):
    lm = tiny_models["gemma3_text"]
    ids = _ids(lm)
    trimmed, _ = cache_ops.prefill(lm, ids)
    with pytest.raises(ValueError, match="window tail"):
        cache_ops.recompute_positions(lm, trimmed, torch.tensor([5]))


def test_selection_ranks_by_score_and_never_takes_the_head():
    errors = torch.tensor([9.0, 0.1, 5.0, 0.2, 3.0, 0.3, 0.0, 0.0, 0.0, 0.0])
    assert select_positions(errors, 0.2).tolist() == [2, 4]
    assert select_positions(errors, 0.0).numel() == 0
    assert select_positions(errors, 1.0).tolist() == list(range(1, 10))
    random = select_positions(errors, 0.3, selection="random", seed=1)
    assert random.numel() == 3 and 0 not in random.tolist()
    assert torch.equal(random, select_positions(errors, 0.3, selection="random", seed=1))
    with pytest.raises(ValueError):
        select_positions(errors, 1.5)


def test_a_blend_gives_the_head_the_targets_own_rows_in_its_own_pass(tiny_lm):
    """Position 0 is recomputed with the chosen tokens (on top of the budget), so callers need no
    separate one-token pass (``replace_head``): a wrong head comes out native in every layer, and the
    rest is what a blend over a cache with the native head already in place gives."""
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    corrupted = _corrupt(native, torch.arange(ids.shape[-1]), seed=5)
    corrupted = KVCache(corrupted.keys, corrupted.values, ids, native.fingerprint, surprisal=torch.rand(ids.shape))
    point = OperatingPoint(0.2, selection="surprisal", recent=0.05)
    blended = blend(tiny_lm, corrupted, point)
    headed_first = blend(tiny_lm, cache_ops.replace_head(tiny_lm, corrupted), point)
    for layer in range(native.num_layers):
        torch.testing.assert_close(blended.keys[layer][:, :, 0], native.keys[layer][:, :, 0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(blended.values[layer][:, :, 0], native.values[layer][:, :, 0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(blended.keys[layer], headed_first.keys[layer], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(blended.values[layer], headed_first.values[layer], rtol=1e-4, atol=1e-4)
    recomputed = (blended.keys[-1] != corrupted.keys[-1]).any(-1).any(1)[0]
    assert recomputed[0] and recomputed.sum() == 1 + round(point.fraction * ids.shape[-1])


def test_error_selection_finds_and_fixes_the_worst_translated_tokens(tiny_lm):
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    bad = torch.tensor([5, 9, 20])
    translated = _corrupt(native, bad)
    native_k, native_v = cache_ops.first_layer_kv(tiny_lm, ids)
    assert set(layer0_error(translated, native_k, native_v).topk(3).indices.tolist()) == set(bad.tolist())
    fraction = bad.numel() / ids.shape[-1]
    blended = blend(tiny_lm, translated, OperatingPoint(fraction, selection="error"))
    for layer in range(native.num_layers):
        torch.testing.assert_close(blended.keys[layer], native.keys[layer], rtol=1e-4, atol=1e-4)
    untouched = blend(tiny_lm, translated, OperatingPoint(0.0, selection="error"))  # the head alone
    assert all(torch.equal(a[:, :, 1:], b[:, :, 1:]) for a, b in zip(untouched.keys, translated.keys, strict=True))
    exact_first = blend(tiny_lm, translated, OperatingPoint(0.0, selection="error"), exact_first_layer=True)
    torch.testing.assert_close(exact_first.keys[0], native.keys[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(exact_first.keys[-1][:, :, 1:], translated.keys[-1][:, :, 1:])


def _eager_attentions(lm, ids) -> tuple[torch.Tensor, ...]:
    """Per layer ``[1, H, T, T]``: the model's own attention probabilities over ``ids`` (its eager
    implementation), what the recorded shares are checked against."""
    implementation = lm.model.config._attn_implementation
    lm.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            return lm.model(input_ids=ids, output_attentions=True).attentions
    finally:
        lm.model.set_attn_implementation(implementation)


def test_attention_to_cache_is_what_the_models_eager_attention_reads(tiny_lm):
    """The shares come from the model's own attention probabilities (its eager implementation, run
    over the whole text): this fails if a query norm, RoPE, scale, GQA group or sliding mask is missed."""
    ids = _ids(tiny_lm)
    keep, queries = ids.shape[-1] - 4, ids[:, -4:]
    native = _full_native_cache(tiny_lm, ids[:, :keep])
    shares = cache_ops.attention_to_cache(tiny_lm, native, queries)
    expected = torch.zeros(keep)
    for weights in _eager_attentions(tiny_lm, ids):  # the last 4 queries over the first keep positions
        read = weights[0, :, keep:, 1:keep].float().sum((0, 1))
        expected[1:] += read / read.sum()
    torch.testing.assert_close(shares, expected, rtol=1e-4, atol=1e-5)
    assert shares[0] == 0 and shares.sum().item() == pytest.approx(tiny_lm.spec.num_layers, rel=1e-4)


def test_prefill_tail_attention_is_what_the_models_eager_attention_reads(tiny_lm):
    """What the last ``OBSERVED_TOKENS`` read in each full-attention layer, recorded during the
    prefill: this fails if a query norm, RoPE, scale, GQA group or mask is missed, or a sliding layer
    (whose cache keeps only its window) is counted."""
    ids = _ids(tiny_lm)
    count = cache_ops.OBSERVED_TOKENS
    cache, _ = cache_ops.prefill(tiny_lm, ids, for_targets=True)
    windows = tiny_lm.spec.sliding_windows
    full_layers = [w for w, window in zip(_eager_attentions(tiny_lm, ids), windows, strict=True) if window is None]
    expected = torch.zeros(ids.shape[-1])
    for weights in full_layers:
        read = weights[0, :, -count:, 1:].float().sum((0, 1))
        expected[1:] += read / read.sum()
    assert cache.tail_attention.shape == ids.shape and cache.tail_attention[0, 0] == 0
    torch.testing.assert_close(cache.tail_attention[0], expected, rtol=1e-4, atol=1e-5)
    assert full_layers and cache.tail_attention.sum().item() == pytest.approx(len(full_layers), rel=1e-4)
    assert cache_ops.prefill(tiny_lm, ids)[0].tail_attention is None


def test_an_attended_share_recomputes_what_the_source_saw_the_end_read_most(tiny_lm):
    """The budget stays ``round(fraction * T)``: the recent share, the selection's positions, and the
    attended share filled with the positions of most ``tail_attention`` among those not yet chosen."""
    ids = _ids(tiny_lm)
    keep = ids.shape[-1] - 3
    native = _full_native_cache(tiny_lm, ids[:, :keep])
    corrupted = _corrupt(native, torch.arange(1, keep), seed=3)
    corrupted.tail_attention = torch.rand(ids[:, :keep].shape, generator=torch.Generator().manual_seed(5))
    point = OperatingPoint(0.5, selection="random", recent=0.1, attended=0.2)
    blended = blend(tiny_lm, corrupted, point)
    changed = (blended.keys[-1] != corrupted.keys[-1]).any(-1).any(1)[0]  # [T]: recomputed positions
    chosen = select_positions(torch.zeros(keep), 0.3, selection="random", recent=0.1)
    shares = corrupted.tail_attention[0].clone()
    shares[0], shares[chosen] = -torch.inf, -torch.inf
    read_most = shares.topk(round(0.5 * keep) - chosen.numel()).indices
    assert changed.nonzero().flatten().tolist() == sorted(chosen.tolist() + read_most.tolist())
    assert changed.sum() == round(0.5 * keep) and not set(read_most.tolist()) & set(chosen.tolist())
    whole = OperatingPoint(0.12, selection="random", recent=0.02, attended=0.1)  # no budget left to the selection
    moved = (blend(tiny_lm, corrupted, whole).keys[-1] - corrupted.keys[-1]).abs().amax(-1).amax(1)[0] > 1e-3
    assert moved[1:].sum() == round(0.12 * keep)  # the head (position 0) is not corrupted: rounding moves it
    corrupted.tail_attention = None
    with pytest.raises(ValueError, match="tail attention"):
        blend(tiny_lm, corrupted, point)


def test_an_operating_point_is_checked_once_and_labelled_as_the_store_keys_name_it():
    """Blended caches are stored under the translator's version plus the point's label: a label
    that changed its form would orphan every stored blend."""
    assert OperatingPoint(0.1, "phrases", recent=0.03).label == "phrases0.1r0.03"
    assert OperatingPoint(0.12, "phrases", 0.02, 0.03).label == "phrases0.12r0.02a0.03"
    assert OperatingPoint(0.1, "phrases", 0.03, 0.07)  # the shares may fill the fraction
    assert OperatingPoint(0.12, "phrases", 0.02, 0.1)  # in decimal: 0.02 + 0.1 > 0.12 in binary
    with pytest.raises(ValueError, match="unknown selection 'names'"):
        OperatingPoint(0.1, "names")
    with pytest.raises(ValueError, match="their sum <= fraction"):
        OperatingPoint(0.1, recent=0.08, attended=0.03)
    with pytest.raises(ValueError, match="fraction <= 1"):
        OperatingPoint(1.5)
    with pytest.raises(ValueError, match=">= 0"):
        OperatingPoint(0.1, recent=-0.01)
