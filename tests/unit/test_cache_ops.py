"""Cache extraction, RoPE round trip and loading, on tiny models of the three architectures."""

import pytest
import torch

from mot_core import cache_ops, codec
from mot_core.errors import FingerprintMismatchError
from mot_core.kv_cache import KVCache

TEXT = "In 1790 the President addressed Congress on the state of the Union, the militia and the debt. " * 3


def _ids(lm, text=TEXT):
    return lm.tokenizer(text, return_tensors="pt").input_ids


def test_extracted_cache_has_the_architecture_shapes(tiny_lm):
    ids = _ids(tiny_lm)
    cache, _ = cache_ops.prefill(tiny_lm, ids)
    spec = tiny_lm.spec
    assert cache.num_layers == spec.num_layers and cache.seq_len == ids.shape[-1]
    for layer in range(spec.num_layers):
        assert cache.keys[layer].shape == (
            1,
            spec.num_kv_heads,
            spec.kept_positions(layer, ids.shape[-1]),
            spec.head_dim,
        )
    assert cache.fingerprint == tiny_lm.fingerprint.id and cache.rope_applied


def test_round_trip_is_exact(tiny_lm):
    """Extract, un-rotate, re-rotate, load: same logits and the same 16 greedy tokens as plain generation."""
    ids = _ids(tiny_lm)
    assert ids.shape[-1] > 2 * 8  # beyond the tiny Gemma's sliding window of 8
    with torch.inference_mode():
        full_logits = tiny_lm.model(input_ids=ids).logits[:, -1].float()
    cache, _ = cache_ops.prefill(tiny_lm, ids[:, :-1])
    unrotated = cache_ops.unrotate(cache, tiny_lm.spec)
    assert not unrotated.rope_applied
    assert max((a - b).abs().max() for a, b in zip(unrotated.keys, cache.keys, strict=True)) > 1e-3
    restored = cache_ops.rerotate(unrotated, tiny_lm.spec)
    logits = cache_ops.next_token_logits(tiny_lm, restored, ids[:, -1:])
    torch.testing.assert_close(logits, full_logits, atol=1e-4, rtol=0)
    plain = cache_ops.generate_plain(tiny_lm, ids, max_new_tokens=16)
    assert torch.equal(cache_ops.generate_from_cache(tiny_lm, restored, ids[:, -1:], max_new_tokens=16), plain)


def test_prefill_surprisal_is_what_the_full_forward_predicts(tiny_lm, monkeypatch):
    monkeypatch.setattr(cache_ops, "SURPRISAL_CHUNK", 7)  # several LM-head chunks, the last one short
    ids = _ids(tiny_lm)
    cache, last_logits = cache_ops.prefill(tiny_lm, ids, for_targets=True)
    with torch.inference_mode():
        logits = tiny_lm.model(input_ids=ids).logits[0].float()
    expected = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="none")
    assert cache.surprisal.shape == ids.shape and cache.surprisal[0, 0] == 0
    torch.testing.assert_close(cache.surprisal[0, 1:], expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(last_logits[0], logits[-1], atol=1e-4, rtol=1e-4)
    assert cache_ops.prefill(tiny_lm, ids)[0].surprisal is None  # only when asked: it costs the LM head


def test_round_trip_through_fp32_codec_is_exact(tiny_lm):
    ids = _ids(tiny_lm)
    cache, _ = cache_ops.prefill(tiny_lm, ids[:, :-1])
    decoded = codec.decode(codec.encode(cache, "float32"), expected_fingerprint=tiny_lm.fingerprint.id)
    plain = cache_ops.generate_plain(tiny_lm, ids, max_new_tokens=8)
    assert torch.equal(cache_ops.generate_from_cache(tiny_lm, decoded, ids[:, -1:], max_new_tokens=8), plain)


def test_shifted_positions_change_the_output(tiny_models):
    """Re-rotating at other positions must matter: guards against a RoPE no-op passing the exact test."""
    lm = tiny_models["llama"]
    ids = _ids(lm)
    cache, _ = cache_ops.prefill(lm, ids[:, :-1])
    exact = cache_ops.next_token_logits(lm, cache, ids[:, -1:])
    shifted = cache_ops.rerotate(cache_ops.unrotate(cache, lm.spec), lm.spec, start=7)
    assert (cache_ops.next_token_logits(lm, shifted, ids[:, -1:]) - exact).abs().max() > 1e-3


def test_foreign_cache_is_refused(tiny_models):
    llama, qwen = tiny_models["llama"], tiny_models["qwen2"]
    cache, _ = cache_ops.prefill(llama, _ids(llama))
    with pytest.raises(FingerprintMismatchError):
        cache_ops.to_model_cache(qwen, cache)


def test_pre_rope_cache_cannot_be_loaded(tiny_models):
    lm = tiny_models["llama"]
    cache, _ = cache_ops.prefill(lm, _ids(lm))
    with pytest.raises(ValueError, match="pre-RoPE"):
        cache_ops.to_model_cache(lm, cache_ops.unrotate(cache, lm.spec))


def test_sliding_layer_with_too_few_positions_is_refused(tiny_models):
    lm = tiny_models["gemma3_text"]
    cache, _ = cache_ops.prefill(lm, _ids(lm))
    short = KVCache(
        [k[:, :, -3:] for k in cache.keys], [v[:, :, -3:] for v in cache.values], cache.token_ids, cache.fingerprint
    )
    with pytest.raises(ValueError, match="holds 3 positions"):
        cache_ops.to_model_cache(lm, short)


def test_sliding_layer_with_extra_positions_is_trimmed(tiny_models):
    """A producer may emit every position for a sliding layer; loading keeps the window tail."""
    lm = tiny_models["gemma3_text"]
    ids = _ids(lm)
    cache, _ = cache_ops.prefill(lm, ids[:, :-1])
    full_llama_style = []
    for layer in range(lm.spec.num_layers):  # pad sliding layers with garbage in front of their tail
        k = cache.keys[layer]
        pad = cache.seq_len - k.shape[2]
        full_llama_style.append(torch.cat((torch.randn(1, k.shape[1], pad, k.shape[3]), k), dim=2))
    values = [
        torch.cat((torch.randn(1, v.shape[1], cache.seq_len - v.shape[2], v.shape[3]), v), dim=2) for v in cache.values
    ]
    padded = KVCache(full_llama_style, values, cache.token_ids, cache.fingerprint)
    torch.testing.assert_close(
        cache_ops.next_token_logits(lm, padded, ids[:, -1:]),
        cache_ops.next_token_logits(lm, cache, ids[:, -1:]),
        atol=1e-5,
        rtol=0,
    )


def test_batch_of_two_contexts(tiny_models):
    lm = tiny_models["qwen2"]
    ids = _ids(lm)[:, :20].repeat(2, 1)
    ids[1, 5] = (ids[1, 5] + 1) % len(lm.tokenizer)
    cache, _ = cache_ops.prefill(lm, ids[:, :-1])
    assert cache.keys[0].shape[0] == 2
    logits = cache_ops.next_token_logits(lm, cache, ids[:, -1:])
    with torch.inference_mode():
        # batched and single kernels sum in another order (1.5e-4 apart on an AMX Xeon); mixing the
        # two contexts up would move the logits by far more
        torch.testing.assert_close(logits, lm.model(input_ids=ids).logits[:, -1], atol=5e-4, rtol=0)
