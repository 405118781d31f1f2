"""A framework-neutral KV cache: the unit that is encoded, stored, translated and loaded.

Modelled on transformers' ``cache_utils`` layers, but plain data: per-layer key/value tensors
of shape ``[batch, kv_heads, kept_len, head_dim]`` plus the facts needed to load it safely.
Sliding-window layers keep only their tail, so ``kept_len`` may differ per layer; layer ``l``
holds positions ``seq_len - kept_len(l) .. seq_len - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from mot_core.errors import FingerprintMismatchError

PER_TOKEN = ("surprisal", "tail_attention")  # the optional per-token notes below, in codec payload order


@dataclass
class KVCache:
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    token_ids: torch.Tensor  # [batch, seq_len] int64: the tokens whose keys/values are cached
    fingerprint: str  # fingerprint of the model that owns this cache space
    rope_applied: bool = True  # True: keys are post-RoPE (as the model caches them)
    # [batch, seq_len] float32: each token's surprisal (nats) under the model that read the context
    # (0 for the first). The tokens that surprised it carry the facts; the target recomputes those
    # first (recompute.blend). None where unknown.
    surprisal: torch.Tensor | None = None
    # [batch, seq_len] float32: how much the context's last tokens read each position under the
    # model that read the context (cache_ops.prefill(for_targets=True); 0 for the first). A continuation reads
    # what they read; the target recomputes those positions too (recompute.blend). None where unknown.
    tail_attention: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.values):
            raise ValueError(f"{len(self.keys)} key layers but {len(self.values)} value layers")
        if self.token_ids.dim() != 2:
            raise ValueError(f"token_ids must be [batch, seq_len], got shape {tuple(self.token_ids.shape)}")
        for layer, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k.dim() != 4 or v.dim() != 4:
                raise ValueError(f"layer {layer}: keys/values must be 4-D [batch, heads, len, dim]")
            if k.shape[:3] != v.shape[:3]:
                raise ValueError(f"layer {layer}: key shape {tuple(k.shape)} vs value shape {tuple(v.shape)}")
            if k.shape[0] != self.token_ids.shape[0]:
                raise ValueError(f"layer {layer}: batch {k.shape[0]} != token batch {self.token_ids.shape[0]}")
            if k.shape[2] > self.seq_len:
                raise ValueError(f"layer {layer}: holds {k.shape[2]} positions but seq_len is {self.seq_len}")
        for name in PER_TOKEN:
            per_token = getattr(self, name)
            if per_token is not None and per_token.shape != self.token_ids.shape:
                raise ValueError(
                    f"{name} shape {tuple(per_token.shape)} != token_ids shape {tuple(self.token_ids.shape)}"
                )

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    @property
    def seq_len(self) -> int:
        return self.token_ids.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    def kept_len(self, layer: int) -> int:
        return self.keys[layer].shape[-2]

    def first_position(self, layer: int) -> int:
        return self.seq_len - self.kept_len(layer)

    def positions(self, layer: int) -> torch.Tensor:
        """Absolute token positions held by ``layer`` (a tail for sliding-window layers)."""
        return torch.arange(self.first_position(layer), self.seq_len)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> KVCache:
        return replace(
            self,
            keys=[k.to(device=device, dtype=dtype) for k in self.keys],
            values=[v.to(device=device, dtype=dtype) for v in self.values],
            token_ids=self.token_ids.to(device=device) if device is not None else self.token_ids,
        )

    def check_owner(self, fingerprint: str) -> None:
        """Refuse to hand this cache to a model other than the one that produced it."""
        if fingerprint != self.fingerprint:
            raise FingerprintMismatchError(
                f"cache belongs to model {self.fingerprint[:16]}..., not {fingerprint[:16]}...; refusing to load"
            )
