"""Architecture adapter: the facts the cache toolkit needs, read from a transformers config.

Nothing here is keyed on a model name: layer count, KV heads, head_dim, per-layer RoPE and
sliding windows come from the config (through transformers' own helpers where they exist),
so llama, qwen2, gemma3_text and any model whose config states the same facts work alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import get_layer_types_and_kwargs
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from mot_core.errors import UnsupportedArchitectureError

SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class RopeSpec:
    """Rotary embedding of one layer: ``angle = position * inv_freq`` on the first ``rotary_dim`` dims."""

    inv_freq: torch.Tensor  # [rotary_dim // 2], float32
    attention_scaling: float
    rotary_dim: int

    @property
    def theta_hint(self) -> float:
        """The base the first-to-second frequency ratio implies (for logs and tests)."""
        ratio = float(self.inv_freq[0] / self.inv_freq[1]) if self.inv_freq.numel() > 1 else 1.0
        return ratio ** (self.rotary_dim / 2)


@dataclass(frozen=True)
class ArchSpec:
    model_type: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    layer_types: tuple[str, ...]
    sliding_windows: tuple[int | None, ...]  # None: the layer keeps every position
    rope: tuple[RopeSpec, ...]
    bos_token_id: int | None
    prepend_bos: bool  # the tokenizer puts BOS first; a cache without it is out of distribution

    def kept_positions(self, layer: int, seq_len: int) -> int:
        """How many trailing positions ``layer`` keeps in its cache after ``seq_len`` tokens.

        Mirrors transformers' ``DynamicSlidingWindowLayer``, which keeps ``window - 1`` positions.
        """
        window = self.sliding_windows[layer]
        return seq_len if window is None else min(seq_len, window - 1)


def _layer_rope_parameters(config, layer_type: str) -> tuple[dict, str | None]:
    params = getattr(config, "rope_parameters", None)
    if params is None:
        raise UnsupportedArchitectureError(f"{config.model_type}: config has no rope_parameters")
    if layer_type in params and isinstance(params[layer_type], dict):  # per-layer-type RoPE (Gemma-3)
        return params[layer_type], layer_type
    return params, None


def _rope_spec(config, layer_type: str, head_dim: int) -> RopeSpec:
    params, keyed_type = _layer_rope_parameters(config, layer_type)
    rotary_dim = int(head_dim * params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)))
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = float(params["rope_theta"])
        inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
        scaling = 1.0
    elif rope_type in ROPE_INIT_FUNCTIONS:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", layer_type=keyed_type)
    else:
        raise UnsupportedArchitectureError(f"{config.model_type}: unknown rope_type {rope_type!r}")
    return RopeSpec(inv_freq=inv_freq.float(), attention_scaling=float(scaling), rotary_dim=rotary_dim)


def _prepends_bos(tokenizer) -> bool:
    if tokenizer is None or tokenizer.bos_token_id is None:
        return False
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def arch_spec(config, tokenizer=None) -> ArchSpec:
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    try:
        num_layers = config.num_hidden_layers
        num_heads = config.num_attention_heads
        num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    except AttributeError as exc:
        raise UnsupportedArchitectureError(f"{config.model_type}: config lacks {exc.name}") from None
    layer_types, layer_kwargs = get_layer_types_and_kwargs(config)
    unsupported = sorted(set(layer_types) - set(SUPPORTED_LAYER_TYPES))
    if unsupported:
        raise UnsupportedArchitectureError(f"{config.model_type}: unsupported attention layer types {unsupported}")
    return ArchSpec(
        model_type=config.model_type,
        num_layers=num_layers,
        num_attention_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        layer_types=tuple(layer_types),
        sliding_windows=tuple(kw.get("sliding_window") for kw in layer_kwargs),
        rope=tuple(_rope_spec(config, t, head_dim) for t in layer_types),
        bos_token_id=tokenizer.bos_token_id if tokenizer is not None else getattr(config, "bos_token_id", None),
        prepend_bos=_prepends_bos(tokenizer),
    )
