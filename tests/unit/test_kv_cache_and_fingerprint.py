import pytest
import torch

from mot_core.fingerprint import fingerprint_model
from mot_core.kv_cache import KVCache
from mot_core.loading import load_model
from mot_core.tiny import save_tiny, tiny_model


def _cache(lengths=(5, 3), seq_len=5):
    keys = [torch.randn(1, 2, n, 4) for n in lengths]
    return KVCache(keys, [torch.randn_like(k) for k in keys], torch.arange(seq_len)[None], "fp")


def test_positions_of_tail_layers():
    cache = _cache()
    assert cache.positions(0).tolist() == [0, 1, 2, 3, 4]
    assert cache.positions(1).tolist() == [2, 3, 4]
    assert cache.nbytes == 4 * (5 + 3) * 2 * 4 * 2


@pytest.mark.parametrize(
    "bad",
    [
        dict(keys=[torch.randn(1, 2, 6, 4)], values=[torch.randn(1, 2, 6, 4)]),  # more positions than tokens
        dict(keys=[torch.randn(1, 2, 5, 4)], values=[torch.randn(1, 3, 5, 4)]),  # heads differ
        dict(keys=[torch.randn(2, 5, 4)], values=[torch.randn(2, 5, 4)]),  # not 4-D
        dict(keys=[torch.randn(2, 2, 5, 4)], values=[torch.randn(2, 2, 5, 4)]),  # batch differs from tokens
    ],
)
def test_inconsistent_caches_are_rejected(bad):
    with pytest.raises(ValueError):
        KVCache(token_ids=torch.arange(5)[None], fingerprint="fp", **bad)


def test_fingerprint_is_stable_through_save_and_load(tmp_path):
    saved = save_tiny("llama", tmp_path / "m")
    assert load_model(str(saved)).fingerprint == tiny_model("llama").fingerprint


def test_fingerprint_changes_with_weights_and_tokenizer():
    base = tiny_model("qwen2")
    other_weights = tiny_model("qwen2", seed=1)
    assert base.fingerprint.weights != other_weights.fingerprint.weights
    assert base.fingerprint.id != other_weights.fingerprint.id
    base.tokenizer.add_tokens(["<extra>"])
    changed = fingerprint_model(base.model, base.tokenizer)
    assert changed.tokenizer != base.fingerprint.tokenizer and changed.weights == base.fingerprint.weights


def test_fingerprint_differs_across_architectures(tiny_models):
    ids = {lm.fingerprint.id for lm in tiny_models.values()}
    assert len(ids) == 3
    assert tiny_models["gemma3_text"].fingerprint.id.startswith("gemma3_text-")
