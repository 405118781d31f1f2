"""Predicted target rows -> a ``KVCache`` the target model can load."""

from __future__ import annotations

import torch

from mot_core.arch import ArchSpec
from mot_core.cache_ops import rerotate
from mot_core.kv_cache import KVCache


def rows_to_cache(
    rows: torch.Tensor,
    spec: ArchSpec,
    token_ids: torch.Tensor,
    fingerprint: str,
    *,
    all_positions: bool = False,
    surprisal: torch.Tensor | None = None,
    tail_attention: torch.Tensor | None = None,
) -> KVCache:
    """``rows [T, L_t, 2*H*D]`` (pre-RoPE) -> post-RoPE cache at positions ``0..T-1``.

    Sliding-window layers keep only the positions the target itself would keep, so translation
    never computes what the target would throw away; ``all_positions`` keeps every position
    (for selective recompute, which trims afterwards). ``surprisal`` and ``tail_attention`` (per
    target token, at least ``T`` of them) are the source's, carried over for the target's recompute.
    """
    seq_len, heads, dim = rows.shape[0], spec.num_kv_heads, spec.head_dim
    keys, values = [], []
    for layer in range(spec.num_layers):
        kept = seq_len if all_positions else spec.kept_positions(layer, seq_len)
        # row layout per head [K_h | V_h] (features.kv_rows) -> [2, H, kept, D]
        kv = rows[seq_len - kept :, layer].reshape(kept, heads, 2, dim).permute(2, 1, 0, 3)
        keys.append(kv[0][None])  # rerotate writes them contiguous
        values.append(kv[1][None].contiguous())
    per_token = {
        name: None if note is None else note.reshape(1, -1)[:, :seq_len].float()
        for name, note in (("surprisal", surprisal), ("tail_attention", tail_attention))
    }
    pre_rope = KVCache(keys, values, token_ids.reshape(1, -1), fingerprint, rope_applied=False, **per_token)
    return rerotate(pre_rope, spec)


def zero_rows(spec: ArchSpec, seq_len: int) -> torch.Tensor:
    return torch.zeros(seq_len, spec.num_layers, 2 * spec.num_kv_heads * spec.head_dim)
