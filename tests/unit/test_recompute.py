"""Selective recompute on tiny models of the three architectures: exact where it must be."""

import pytest
import torch
from transformers import DynamicCache

from mot_core import cache_ops
from mot_core.kv_cache import KVCache
from mot_core.translation.recompute import blend, layer0_error, select_positions

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


def test_recomputing_the_corrupted_positions_restores_the_native_cache(tiny_lm):
    """Every wrong entry recomputed over an otherwise exact cache gives back the prefill, in every layer.

    This fails if the mask lets a recomputed token see a stale entry, misses its sliding window,
    or puts fresh entries at the wrong positions.
    """
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    positions = torch.tensor([3, 4, 11, 17, ids.shape[-1] - 2])
    corrupted = _corrupt(native, positions)
    restored = cache_ops.recompute_positions(tiny_lm, corrupted, positions)
    for layer in range(native.num_layers):
        torch.testing.assert_close(restored.keys[layer], native.keys[layer], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(restored.values[layer], native.values[layer], rtol=1e-4, atol=1e-4)
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
    restored = blend(tiny_lm, corrupted, fraction)
    for layer in range(native.num_layers):
        torch.testing.assert_close(restored.keys[layer], native.keys[layer], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(restored.values[layer], native.values[layer], rtol=1e-4, atol=1e-4)
    by_error = blend(tiny_lm, corrupted, fraction, selection="error")
    assert not torch.allclose(by_error.keys[-1], native.keys[-1], atol=1e-3)
    corrupted.surprisal = None
    with pytest.raises(ValueError, match="surprisal"):
        blend(tiny_lm, corrupted, fraction)


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


def test_error_selection_finds_and_fixes_the_worst_translated_tokens(tiny_lm):
    ids = _ids(tiny_lm)
    native = _full_native_cache(tiny_lm, ids)
    bad = torch.tensor([5, 9, 20])
    translated = _corrupt(native, bad)
    native_k, native_v = cache_ops.first_layer_kv(tiny_lm, ids)
    assert set(layer0_error(translated, native_k, native_v).topk(3).indices.tolist()) == set(bad.tolist())
    fraction = bad.numel() / ids.shape[-1]
    blended = blend(tiny_lm, translated, fraction, selection="error")
    for layer in range(native.num_layers):
        torch.testing.assert_close(blended.keys[layer], native.keys[layer], rtol=1e-4, atol=1e-4)
    untouched = blend(tiny_lm, translated, 0.0, selection="error")
    assert all(torch.equal(a, b) for a, b in zip(untouched.keys, translated.keys, strict=True))
    exact_first = blend(tiny_lm, translated, 0.0, selection="error", exact_first_layer=True)
    torch.testing.assert_close(exact_first.keys[0], native.keys[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(exact_first.keys[-1], translated.keys[-1])
