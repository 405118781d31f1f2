"""Rotary position embedding: remove it from cached keys and apply it at any positions.

Cached keys are post-RoPE. To move a cache to other positions, or into another model's
RoPE, keys are first rotated back to their pre-RoPE form with the *producing* layer's own
frequencies, then rotated with the consuming layer's. The maths matches transformers'
``apply_rotary_pos_emb`` (``rotate_half`` convention, cos/sin computed in float32).
"""

from __future__ import annotations

import torch

from mot_core.arch import RopeSpec


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


Table = tuple[torch.Tensor, torch.Tensor]  # cos, sin


def cos_sin(rope: RopeSpec, positions: torch.Tensor) -> Table:
    """Unscaled cos/sin tables ``[len(positions), rotary_dim]`` in float32."""
    freqs = positions.to(torch.float32)[:, None] * rope.inv_freq.to(positions.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def layer_tables(ropes: list[RopeSpec], starts: list[int], lengths: list[int], device) -> list[Table]:
    """``cos_sin`` of each layer's positions ``start..start+length-1``, computed once per distinct
    RoPE and range: a model has one or two RoPEs, and computing the table per layer was ~0.015 s of
    a Gemma-3 translation at 1024 tokens on the 2-core reference CPU."""
    tables: dict[tuple, Table] = {}
    out = []
    for rope, start, length in zip(ropes, starts, lengths, strict=True):
        key = (rope.rotary_dim, rope.attention_scaling, tuple(rope.inv_freq.tolist()), start, length)
        if key not in tables:
            tables[key] = cos_sin(rope, torch.arange(start, start + length, device=device))
        out.append(tables[key])
    return out


def _split(keys: torch.Tensor, rope: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    return keys[..., : rope.rotary_dim], keys[..., rope.rotary_dim :]


def apply_rope(keys: torch.Tensor, rope: RopeSpec, positions: torch.Tensor, table: Table | None = None) -> torch.Tensor:
    """Rotate pre-RoPE ``keys [..., len, head_dim]`` to ``positions`` (what the model caches).

    ``table``: ``cos_sin(rope, positions)``, if the caller already has it."""
    rot, passthrough = _split(keys, rope)
    cos, sin = table if table is not None else cos_sin(rope, positions)
    if rope.attention_scaling != 1.0:
        cos, sin = cos * rope.attention_scaling, sin * rope.attention_scaling
    cos, sin = cos.to(keys.dtype), sin.to(keys.dtype)
    if _differentiable(keys):
        return _with_passthrough(rot * cos + rotate_half(rot) * sin, passthrough)
    return _rotated(rot, passthrough, cos, sin, sign=1.0, dtype=keys.dtype)


def remove_rope(
    keys: torch.Tensor, rope: RopeSpec, positions: torch.Tensor, table: Table | None = None
) -> torch.Tensor:
    """Inverse of ``apply_rope``: rotate by the negative angle and undo the attention scaling
    (half-precision keys are computed in float32)."""
    rot, passthrough = _split(keys, rope)
    compute = torch.float32 if keys.dtype in (torch.float16, torch.bfloat16) else keys.dtype
    cos, sin = table if table is not None else cos_sin(rope, positions)
    if rope.attention_scaling != 1.0:
        cos, sin = cos / rope.attention_scaling, sin / rope.attention_scaling
    if _differentiable(keys):
        rot32 = rot.to(compute)
        return _with_passthrough((rot32 * cos - rotate_half(rot32) * sin).to(keys.dtype), passthrough)
    return _rotated(rot, passthrough, cos, sin, sign=-1.0, dtype=compute).to(keys.dtype)


def _differentiable(keys: torch.Tensor) -> bool:
    """Whether autograd needs the rotation as an expression (``_rotated`` writes into its output)."""
    return torch.is_grad_enabled() and keys.requires_grad


def _rotated(
    rot: torch.Tensor, passthrough: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, sign: float, dtype
) -> torch.Tensor:
    """``rot * cos + sign * rotate_half(rot) * sin``, then ``passthrough``, as a new contiguous
    tensor of ``dtype``.

    Half by half with fused multiply-adds: no ``rotate_half`` copy, no temporaries, no concatenation.
    About half the time of the expression (30 SmolLM2 layers' keys at 1024 tokens: 3.5 ms against
    7.2 ms on a 2-core Intel Xeon); equal to it within float rounding.
    """
    half, rotary = rot.shape[-1] // 2, rot.shape[-1]
    out = torch.empty((*rot.shape[:-1], rotary + passthrough.shape[-1]), dtype=dtype, device=rot.device)
    low, high = rot[..., :half], rot[..., half:]
    torch.mul(low, cos[..., :half], out=out[..., :half]).addcmul_(high, sin[..., :half], value=-sign)
    torch.mul(high, cos[..., half:rotary], out=out[..., half:rotary]).addcmul_(low, sin[..., half:], value=sign)
    if passthrough.shape[-1]:
        out[..., rotary:] = passthrough
    return out


def _with_passthrough(rotated: torch.Tensor, passthrough: torch.Tensor) -> torch.Tensor:
    """The rotated dims and the rest (partial rotary); with none left, ``rotated`` itself: a whole
    copy of every layer's keys less (the models here rotate every dim)."""
    return rotated if passthrough.shape[-1] == 0 else torch.cat((rotated, passthrough), dim=-1)
