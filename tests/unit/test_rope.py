import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from mot_core.arch import RopeSpec, arch_spec
from mot_core.rope import apply_rope, remove_rope
from mot_core.tiny import tiny_config


def test_matches_transformers_llama_rotation():
    config = tiny_config("llama")
    spec = arch_spec(config)
    keys = torch.randn(1, 2, 10, spec.head_dim)
    positions = torch.arange(3, 13)
    cos, sin = LlamaRotaryEmbedding(config)(keys, positions[None])
    _, reference = apply_rotary_pos_emb(keys, keys, cos, sin)
    torch.testing.assert_close(apply_rope(keys, spec.rope[0], positions), reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scaling,rotary_dim", [(1.0, 64), (1.3, 64), (1.0, 32)])
def test_remove_inverts_apply(scaling, rotary_dim):
    rope = RopeSpec(1.0 / (1e4 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)), scaling, rotary_dim)
    keys = torch.randn(2, 3, 50, 64)
    positions = torch.arange(1000, 1050)
    rotated = apply_rope(keys, rope, positions)
    assert not torch.allclose(rotated[..., :rotary_dim], keys[..., :rotary_dim])
    torch.testing.assert_close(remove_rope(rotated, rope, positions), keys, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rotated[..., rotary_dim:], keys[..., rotary_dim:])


def test_shift_equals_rotation_at_new_positions():
    spec = arch_spec(tiny_config("qwen2"))
    keys = torch.randn(1, 1, 8, spec.head_dim)
    at_zero = apply_rope(keys, spec.rope[0], torch.arange(8))
    moved = apply_rope(remove_rope(at_zero, spec.rope[0], torch.arange(8)), spec.rope[0], torch.arange(100, 108))
    torch.testing.assert_close(moved, apply_rope(keys, spec.rope[0], torch.arange(100, 108)), atol=1e-5, rtol=1e-5)


def test_bf16_keys_unrotate_in_float32():
    spec = arch_spec(tiny_config("llama"))
    keys = torch.randn(1, 2, 16, spec.head_dim)
    rotated = apply_rope(keys, spec.rope[0], torch.arange(16)).to(torch.bfloat16)
    back = remove_rope(rotated, spec.rope[0], torch.arange(16))
    assert back.dtype == torch.bfloat16
    torch.testing.assert_close(back.float(), keys, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("scaling,rotary_dim", [(1.0, 64), (1.3, 48)])
def test_serving_rotation_written_in_place_equals_the_differentiable_one(scaling, rotary_dim):
    """Without autograd the rotation is written half by half into a new tensor; with it, the plain
    expression. They must agree."""
    rope = RopeSpec(1.0 / (1e4 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)), scaling, rotary_dim)
    keys = torch.randn(1, 3, 20, 64, requires_grad=True)
    positions = torch.arange(5, 25)
    for rope_op in (apply_rope, remove_rope):
        expression = rope_op(keys, rope, positions)
        assert expression.grad_fn is not None
        with torch.no_grad():
            in_place = rope_op(keys, rope, positions)
        torch.testing.assert_close(in_place, expression.detach(), rtol=0, atol=1e-6)
