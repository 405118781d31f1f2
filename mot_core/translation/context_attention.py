"""Causal self-attention over a context's positions, inside a translator.

Every other part of ``MixtureTranslator`` maps one position's aligned source rows to that
position's target rows. A target key, though, carries what the target's own heads gathered from
earlier tokens, and what the source's heads gathered is not the same thing: a per-position map
cannot recover a fact the source kept at another position (``reports/experiments/copying/``).
This block lets each position read the earlier ones: a learned mixture over source layers, a few
heads of causal attention with RoPE over it (a target position still sees nothing past its own
end), and the result is one more linear input of every target layer (``MixtureTranslator``'s
``context_map``, zero at first so that adding the block to a trained translator changes nothing).
At 1024 tokens and 4 heads of 32 it is ~0.3 G multiply-adds, against ~0.5 T for the target's prefill.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mot_core.arch import RopeSpec
from mot_core.rope import apply_rope

ROPE_BASE = 10_000.0


class ContextAttention(nn.Module):
    def __init__(self, source_layers: int, source_width: int, heads: int, head_dim: int = 32) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.layer_logits = nn.Parameter(torch.zeros(source_layers))  # uniform over source depth at first
        self.qkv = nn.Parameter(torch.randn(source_width, 3 * heads * head_dim) / math.sqrt(source_width))
        inv_freq = 1.0 / ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.rope = RopeSpec(inv_freq=inv_freq, attention_scaling=1.0, rotary_dim=head_dim)

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    def forward(self, source: torch.Tensor) -> torch.Tensor:
        """Standardised source rows, layer-major ``[Ls, T, Fs]`` -> ``[T, heads * head_dim]``."""
        seq_len = source.shape[1]
        mixed = torch.einsum("l,ltf->tf", self.layer_logits.softmax(-1), source)
        q, k, v = (mixed @ self.qkv).view(seq_len, 3, self.heads, self.head_dim).permute(1, 2, 0, 3)
        positions = torch.arange(seq_len, device=source.device)
        q, k = apply_rope(q, self.rope, positions), apply_rope(k, self.rope, positions)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [heads, T, head_dim]
        return out.transpose(0, 1).reshape(seq_len, self.width)
