"""KV caches as feature rows: one row per token and layer, keys without RoPE.

Rows are ``[K heads | V heads]`` flattened, so a translator sees position-free content; the
positions come back when ``assemble`` re-rotates with the target's RoPE.
"""

from __future__ import annotations

import warnings

import torch

from mot_core.arch import ArchSpec
from mot_core.cache_ops import first_layer_kv, unrotate
from mot_core.kv_cache import KVCache
from mot_core.loading import FirstLayer, LoadedModel

# torch warns once per process that sparse CSR support is in beta; the one part used here is its
# product with a dense matrix (align_rows), checked against the dense product in the tests
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def kv_rows(cache: KVCache, spec: ArchSpec) -> torch.Tensor:
    """``[seq_len, num_layers, 2 * kv_heads * head_dim]`` un-rotated K|V of batch item 0, stored
    layer-major (``align_rows`` reads it layer by layer).

    Needs every position in every layer (contexts no longer than the smallest sliding window).
    """
    short = [i for i in range(cache.num_layers) if cache.kept_len(i) != cache.seq_len]
    if short:
        raise ValueError(f"layers {short} hold only a window tail; use contexts shorter than the window")
    plain = unrotate(cache, spec)
    # one strided copy per layer into the final layout: concatenating, transposing and stacking
    # copied the whole 30-layer source cache three times (~0.03 s at 1024 tokens, 2% of a prefill)
    _, heads, seq_len, dim = plain.keys[0].shape
    rows = torch.empty(cache.num_layers, seq_len, heads, 2, dim, device=plain.keys[0].device)
    for layer, (k, v) in enumerate(zip(plain.keys, plain.values, strict=True)):
        rows[layer, :, :, 0] = k[0].transpose(0, 1)
        rows[layer, :, :, 1] = v[0].transpose(0, 1)
    return rows.flatten(2).transpose(0, 1)


def first_layer_rows(lm: LoadedModel | FirstLayer, token_ids: torch.Tensor) -> torch.Tensor:
    """``[T, 2 * kv_heads * head_dim]``: the model's own layer-0 rows of ``token_ids [1, T]``, as
    ``kv_rows`` lays them out. Exact on any text (``cache_ops.first_layer_kv``)."""
    keys, values = first_layer_kv(lm, token_ids)
    layer0 = KVCache([keys], [values], token_ids.reshape(1, -1), "", rope_applied=True)
    return kv_rows(layer0, lm.spec)[:, 0]


def key_columns(spec: ArchSpec) -> torch.Tensor:
    """Mask of the key columns of a ``kv_rows`` row (per head: its K, then its V)."""
    columns = torch.zeros(spec.num_kv_heads, 2, spec.head_dim, dtype=torch.bool)
    columns[:, 0] = True
    return columns.flatten()


def align_rows(source_rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mix source rows ``[T_s, L, F]`` into target positions with alignment ``weights [T_t, T_s]``;
    ``[T_t, L, F]`` out, stored layer-major as the translator reads it.

    Pass ``Alignment.to_sparse()``: each target token overlaps a few source tokens, so the sparse
    product costs a few rows per token where the dense one costs ``T_t * T_s``. One product per
    layer, from ``kv_rows``' layer-major rows into layer-major rows: the translator's
    standardisation then reads them in order instead of striding across layers (with it, 11 ms
    against 19 ms for SmolLM2's 30 layers at 1024 tokens on a 2-core Intel Xeon; the same bits).
    """
    layers, width = source_rows.shape[1:]
    per_layer = source_rows.transpose(0, 1).contiguous()  # no copy for kv_rows' rows
    weights = weights.to(device=source_rows.device, dtype=source_rows.dtype)
    if weights.is_sparse:
        weights = weights.to_sparse_csr()
    mixed = per_layer.new_empty(layers, weights.shape[0], width)
    for layer in range(layers):
        torch.mm(weights, per_layer[layer], out=mixed[layer])
    return mixed.transpose(0, 1)
