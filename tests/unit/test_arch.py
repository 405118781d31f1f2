import pytest
import torch
from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config

from mot_core.arch import arch_spec
from mot_core.errors import UnsupportedArchitectureError


def test_llama_facts_come_from_config():
    spec = arch_spec(
        LlamaConfig(
            num_hidden_layers=3,
            num_attention_heads=9,
            num_key_value_heads=3,
            hidden_size=576,
            rope_parameters={"rope_type": "default", "rope_theta": 1e5},
        )
    )
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (3, 3, 64)
    assert spec.sliding_windows == (None, None, None)
    expected = 1.0 / (1e5 ** (torch.arange(0, 64, 2).float() / 64))
    torch.testing.assert_close(spec.rope[0].inv_freq, expected)


def test_gemma3_per_layer_rope_and_windows():
    spec = arch_spec(Gemma3TextConfig(num_hidden_layers=12, sliding_window=512, head_dim=256))
    assert spec.layer_types[5] == "full_attention" and spec.layer_types[0] == "sliding_attention"
    assert spec.sliding_windows[0] == 512 and spec.sliding_windows[5] is None
    assert spec.rope[0].theta_hint == pytest.approx(1e4, rel=1e-3)
    assert spec.rope[5].theta_hint == pytest.approx(1e6, rel=1e-3)
    assert spec.kept_positions(0, 2000) == 511 and spec.kept_positions(5, 2000) == 2000
    assert spec.kept_positions(0, 100) == 100


def test_qwen2_without_sliding_keeps_everything():
    spec = arch_spec(Qwen2Config(num_hidden_layers=2, use_sliding_window=False, sliding_window=4096))
    assert spec.sliding_windows == (None, None)


def test_mistral_style_sliding_window_without_layer_types():
    spec = arch_spec(MistralConfig(num_hidden_layers=2, sliding_window=64))
    assert spec.sliding_windows == (64, 64)


def test_scaled_rope_uses_transformers_init():
    config = LlamaConfig(
        num_hidden_layers=1,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    )
    spec = arch_spec(config)
    plain = 1.0 / (1e4 ** (torch.arange(0, spec.head_dim, 2).float() / spec.head_dim))
    torch.testing.assert_close(spec.rope[0].inv_freq, plain / 4.0)


def test_unsupported_layer_type_is_a_clear_error():
    config = LlamaConfig(num_hidden_layers=2)
    config.layer_types = ["full_attention", "linear_attention"]
    with pytest.raises(UnsupportedArchitectureError, match="linear_attention"):
        arch_spec(config)


def test_bos_requirement_read_from_tokenizer(tiny_models):
    assert all(lm.spec.prepend_bos for lm in tiny_models.values())
    assert tiny_models["llama"].spec.bos_token_id == tiny_models["llama"].tokenizer.bos_token_id
