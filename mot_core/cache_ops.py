"""Move KV caches between a transformers model and the framework-neutral ``KVCache``.

``prefill`` runs the model over a context and extracts its cache; ``to_model_cache`` builds the
model's own ``DynamicCache`` from a ``KVCache`` (refusing caches of other models), so
``generate_from_cache`` continues exactly where the prefill stopped; ``unrotate``/``rerotate``
convert keys between post-RoPE (as cached) and pre-RoPE form; ``first_layer_kv`` and
``recompute_positions`` let the target compute part of a context itself on top of a given cache;
``attention_to_cache`` says which cached positions the tokens after a cache read.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from dataclasses import replace

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from mot_core.arch import ArchSpec
from mot_core.kv_cache import KVCache
from mot_core.loading import LoadedModel
from mot_core.recompute_attention import query_chunks
from mot_core.rope import apply_rope, layer_tables, remove_rope


def _as_batch(ids: torch.Tensor | list[int]) -> torch.Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long)
    return ids[None, :] if ids.dim() == 1 else ids


def extract(lm: LoadedModel, model_cache: DynamicCache, token_ids: torch.Tensor) -> KVCache:
    """Copy a model's ``DynamicCache`` into a ``KVCache`` (sliding layers keep only their tail)."""
    keys, values = [], []
    for layer in model_cache.layers:
        keys.append(layer.keys.detach().clone())
        values.append(layer.values.detach().clone())
    return KVCache(keys, values, _as_batch(token_ids).cpu(), lm.fingerprint.id, rope_applied=True)


OBSERVED_TOKENS = 4  # the context's last tokens whose attention ``prefill(for_targets=True)`` records


@torch.inference_mode()
def prefill(
    lm: LoadedModel, token_ids: torch.Tensor | list[int], *, for_targets: bool = False
) -> tuple[KVCache, torch.Tensor]:
    """Run the model over ``token_ids``; returns the cache and the logits of the last position.

    Only the last position goes through the LM head (as in serving engines): with vocabularies of
    150-260k tokens, the head over every position would cost as much as the layers. ``for_targets``
    also records what the targets' recompute chooses tokens by (``recompute.blend``): each token's
    surprisal (``KVCache.surprisal``, ``token_surprisal``: the tokens that carry the facts) and what
    the context's last ``OBSERVED_TOKENS`` read (``KVCache.tail_attention``: what a continuation
    will read), in the same pass. The source model does this once per context for every target.
    """
    ids = _as_batch(token_ids).to(lm.device)
    model_cache = DynamicCache(config=lm.model.config)
    tail_attention = torch.zeros(ids.shape, dtype=torch.float32)
    with _recording_tail_attention(lm, model_cache, tail_attention) if for_targets else nullcontext():
        out = lm.model(
            input_ids=ids, cache=model_cache, use_cache=True, logits_to_keep=1, output_hidden_states=for_targets
        )
    cache = extract(lm, model_cache, ids)
    if for_targets:
        surprisal = token_surprisal(lm, out.hidden_states[-1], ids)
        cache = replace(cache, surprisal=surprisal, tail_attention=tail_attention)
    return cache, out.logits[:, -1, :].float()


@contextmanager
def _recording_tail_attention(lm: LoadedModel, model_cache: DynamicCache, shares: torch.Tensor):
    """While a prefill runs: add to ``shares [batch, T]`` what its last ``OBSERVED_TOKENS`` read in each
    full-attention layer (``_read_shares``; SnapKV's observation window, Li et al., 2024).

    A hook on each attention module recomputes the weights of those few queries from the module's
    own inputs (``_attention_weights``), so the pass keeps its own attention implementation. Sliding
    layers are left out: their cache keeps only the window, and what they read is the recent text
    that the recompute's recent share covers anyway.
    """
    seq_len = shares.shape[-1]
    count = min(OBSERVED_TOKENS, seq_len - 1)
    query_positions = torch.arange(seq_len - count, seq_len)[:, None]
    causal = (torch.arange(seq_len) <= query_positions)[None, None].to(lm.device)

    def record(module, args, kwargs, output) -> None:
        layer = model_cache.layers[module.layer_idx]
        if count <= 0 or layer.keys.shape[-2] != seq_len:
            return
        cos, sin = kwargs["position_embeddings"]
        tail = {
            "hidden_states": kwargs["hidden_states"][:, -count:],
            "position_embeddings": (cos[:, -count:], sin[:, -count:]),
            "attention_mask": causal,
        }
        shares.add_(_read_shares(_attention_weights(module, tail, layer), seq_len))

    decoder_layers = lm.model.get_decoder().layers
    hooks = [layer.self_attn.register_forward_hook(record, with_kwargs=True) for layer in decoder_layers]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


SURPRISAL_CHUNK = 256  # positions per LM-head call: [256, vocab] logits at a time, not [T, vocab]


def token_surprisal(lm: LoadedModel, final_hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """``-log p(token | tokens before it)`` per position ``[batch, T]`` (0 for the first), from the
    final hidden states ``[batch, T, d]`` (after the last norm, as the LM head reads them)."""
    head = lm.model.get_output_embeddings()
    softcap = getattr(lm.model.config, "final_logit_softcapping", None)
    ids = _as_batch(token_ids).to(final_hidden.device)
    out = torch.zeros(ids.shape, dtype=torch.float32)
    for start in range(0, ids.shape[-1] - 1, SURPRISAL_CHUNK):
        end = min(start + SURPRISAL_CHUNK, ids.shape[-1] - 1)
        logits = head(final_hidden[:, start:end]).float()
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, start + 1 : end + 1], reduction="none")
        out[:, start + 1 : end + 1] = nll.cpu()
    return out


def to_model_cache(lm: LoadedModel, cache: KVCache) -> DynamicCache:
    """Build the model's own cache object from ``cache``; refuses foreign or un-rotated caches."""
    cache.check_owner(lm.fingerprint.id)
    if not cache.rope_applied:
        raise ValueError("keys are pre-RoPE; call rerotate() before loading into a model")
    spec = lm.spec
    if cache.num_layers != spec.num_layers:
        raise ValueError(f"cache has {cache.num_layers} layers, model has {spec.num_layers}")
    model_cache = DynamicCache(config=lm.model.config)
    param_dtype = next(lm.model.parameters()).dtype
    for index, layer in enumerate(model_cache.layers):
        needed = spec.kept_positions(index, cache.seq_len)
        if cache.kept_len(index) < needed:
            raise ValueError(f"layer {index} holds {cache.kept_len(index)} positions, model needs {needed}")
        k = cache.keys[index][:, :, cache.kept_len(index) - needed :].to(lm.device, param_dtype)
        v = cache.values[index][:, :, cache.kept_len(index) - needed :].to(lm.device, param_dtype)
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k.contiguous(), v.contiguous()
        if hasattr(layer, "cumulative_length"):  # sliding layers count positions beyond what they keep
            layer.cumulative_length = cache.seq_len
    return model_cache


_BOS_HEADS: dict[str, KVCache] = {}  # model fingerprint -> the native cache of its BOS alone


def _head_cache(lm: LoadedModel, head_ids: torch.Tensor) -> KVCache:
    """The native cache of a context's first tokens. A lone BOS is the same for every context and is
    remembered; any other head (models without a BOS start with the context's own first token) is
    computed each time, as a new context pays for it: a remembered one made ``mot eval``'s
    fastest-of-N timing leave out Qwen2.5's one-token pass (~0.03x of its prefill on a CPU)."""
    if not (lm.spec.prepend_bos and head_ids[0].tolist() == [lm.spec.bos_token_id]):
        return prefill(lm, head_ids)[0]
    if lm.fingerprint.id not in _BOS_HEADS:
        _BOS_HEADS[lm.fingerprint.id] = prefill(lm, head_ids)[0]
    return _BOS_HEADS[lm.fingerprint.id]


@torch.inference_mode()
def replace_head(lm: LoadedModel, cache: KVCache, positions: int = 1) -> KVCache:
    """Recompute the first ``positions`` tokens natively and put their keys/values into ``cache``.

    Position 0 (BOS or the first token) attends only to itself: its keys/values depend on the
    token alone, cost one token of compute, and act as the attention sink, so a translated cache
    gets the target's own. Layers whose window no longer holds those positions are left as they are.
    At an operating point ``recompute.blend`` computes the head in its own pass instead.
    """
    cache.check_owner(lm.fingerprint.id)
    head = _head_cache(lm, cache.token_ids[:, :positions])
    keys, values = list(cache.keys), list(cache.values)
    for layer in range(cache.num_layers):
        start = cache.first_position(layer)
        if start < positions:
            n = positions - start
            keys[layer] = torch.cat(
                (head.keys[layer][:, :, start:].to(keys[layer].dtype), keys[layer][:, :, n:]), dim=2
            )
            values[layer] = torch.cat(
                (head.values[layer][:, :, start:].to(values[layer].dtype), values[layer][:, :, n:]), dim=2
            )
    return replace(cache, keys=keys, values=values)


class _StopForward(Exception):
    """Raised to end a forward pass once the layers of interest have stored their keys/values."""


class _KeysValuesUpTo(DynamicCache):
    """A cache that ends the forward pass as soon as layer ``last_layer`` has stored its keys and
    values: what the layers compute after that (the last one's attention and MLP, the layers
    above it) is not needed when only the cache is."""

    def __init__(self, last_layer: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.last_layer = last_layer

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        out = self._store(key_states, value_states, layer_idx, *args, **kwargs)
        if layer_idx == self.last_layer:
            raise _StopForward
        return out

    def _store(self, key_states, value_states, layer_idx, *args, **kwargs):
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class _RecomputedInPlace(_KeysValuesUpTo):
    """A full cache whose rows at ``positions`` each layer overwrites with the fresh keys/values of
    the tokens recomputed there, attending over all of it (``_in_place_masks``). Appending them
    instead, as a ``DynamicCache`` does, copied every layer twice more and had each query attend
    over the stale rows too, masked."""

    def __init__(
        self, positions: torch.Tensor, last_layer: int, layers: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        super().__init__(last_layer, ddp_cache_data=layers)  # copies them (each onto an empty tensor)
        self.positions = positions

    def _store(self, key_states, value_states, layer_idx, *args, **kwargs):
        layer = self.layers[layer_idx]
        layer.keys.index_copy_(2, self.positions, key_states)
        layer.values.index_copy_(2, self.positions, value_states)
        return layer.keys, layer.values


def _fill_cache(lm: LoadedModel, model_cache: DynamicCache, **inputs) -> None:
    """Run the decoder (no LM head) until ``model_cache`` has what it needs."""
    try:
        lm.model.get_decoder()(cache=model_cache, use_cache=True, **inputs)
    except _StopForward:
        pass


@torch.inference_mode()
def first_layer_kv(lm: LoadedModel, token_ids: torch.Tensor | list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's own layer-0 keys (post-RoPE) and values ``[1, H, T, D]`` for every position.

    Layer 0's keys and values are a function of each token alone (no attention before them), so
    they are exact for any context, for the price of one layer's K/V projections instead of a prefill.
    """
    model_cache = _KeysValuesUpTo(0)  # plain layers: every position kept, whatever the layer type
    _fill_cache(lm, model_cache, input_ids=_as_batch(token_ids).to(lm.device))
    return model_cache.layers[0].keys, model_cache.layers[0].values


def _recompute_masks(spec: ArchSpec, seq_len: int, positions: torch.Tensor, attn_implementation: str):
    """Masks ``[1, 1, m, seq_len + m]`` for tokens at ``positions`` whose fresh entries are appended
    after the cache (``attention_to_cache``: tokens that follow it), one per layer type.

    Query ``j`` (at ``positions[j]``) sees the cached entries before it, except those being
    recomputed, whose fresh entries it sees instead.
    """
    key_positions = torch.cat((torch.arange(seq_len), positions))
    replaced = torch.zeros(seq_len + positions.numel(), dtype=torch.bool)
    replaced[positions] = True
    query = positions[:, None]
    fresh = torch.arange(seq_len + positions.numel()) >= seq_len
    visible = torch.where(fresh, key_positions <= query, (key_positions < query) & ~replaced)
    return _per_layer_type(spec, visible, key_positions, query, attn_implementation)


def _in_place_masks(spec: ArchSpec, seq_len: int, positions: torch.Tensor, attn_implementation: str):
    """Masks ``[1, 1, m, seq_len]`` for tokens recomputed in place (``_RecomputedInPlace``): query
    ``j`` sees every position up to its own, the recomputed ones holding their fresh entries."""
    key_positions = torch.arange(seq_len)
    query = positions[:, None]
    return _per_layer_type(spec, key_positions <= query, key_positions, query, attn_implementation)


def _per_layer_type(spec: ArchSpec, visible, key_positions, query, attn_implementation: str):
    """``visible [m, K]`` as one mask per layer type: sliding layers also drop everything outside
    the window, as the model's own masks do; eager attention takes an additive float mask."""
    masks = {}
    for layer_type, window in zip(spec.layer_types, spec.sliding_windows, strict=True):
        mask = visible if window is None else visible & (key_positions > query - window)
        if attn_implementation == "eager":
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        masks[layer_type] = mask[None, None]
    return masks


def recompute_positions(lm: LoadedModel, cache: KVCache, positions: torch.Tensor, *, grad: bool = False) -> KVCache:
    """The target computes the tokens at ``positions`` itself, attending over ``cache`` for the rest.

    Their fresh keys/values replace the cached ones (selective recompute in the manner of
    CacheBlend). ``cache`` must hold every position in every layer (sliding layers included:
    a recomputed token needs its whole window); trim it with ``to_model_cache`` afterwards.
    With ``grad``, gradients flow back into the cache's tensors through the target's attention
    (training a translator through the recompute); otherwise it runs in inference mode.
    """
    with torch.inference_mode(not grad):
        return _recompute_positions(lm, cache, positions)


def _recompute_positions(lm: LoadedModel, cache: KVCache, positions: torch.Tensor) -> KVCache:
    cache.check_owner(lm.fingerprint.id)
    if not cache.rope_applied:
        raise ValueError("keys are pre-RoPE; call rerotate() first")
    short = [i for i in range(cache.num_layers) if cache.kept_len(i) != cache.seq_len]
    if short:
        raise ValueError(f"layers {short} hold only a window tail; recompute needs every position")
    positions = torch.as_tensor(positions, dtype=torch.long).unique()  # sorted, no repeats
    if positions.numel() == 0:
        return cache
    if int(positions[0]) < 0 or int(positions[-1]) >= cache.seq_len:
        raise ValueError(f"positions must lie in 0..{cache.seq_len - 1}")
    # the last layer's attention output and MLP would feed nothing
    model_cache = _RecomputedInPlace(positions.to(lm.device), cache.num_layers - 1, _model_layers(lm, cache))
    _fill_cache(
        lm,
        model_cache,
        input_ids=cache.token_ids[:, positions].to(lm.device),
        position_ids=positions[None].to(lm.device),
        attention_mask=_model_mask(lm, cache.seq_len, positions, in_place=True),
        recompute_chunks=query_chunks(positions),
    )
    keys, values = [], []
    for layer, old_k, old_v in zip(model_cache.layers, cache.keys, cache.values, strict=True):
        keys.append(layer.keys.to(old_k.device, old_k.dtype))
        values.append(layer.values.to(old_v.device, old_v.dtype))
    return replace(cache, keys=keys, values=values)


def _model_layers(lm: LoadedModel, cache: KVCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The cache's keys/values per layer on the model's device and dtype (a ``DynamicCache``'s data)."""
    dtype = next(lm.model.parameters()).dtype
    return [(k.to(lm.device, dtype), v.to(lm.device, dtype)) for k, v in zip(cache.keys, cache.values, strict=True)]


def _model_mask(lm: LoadedModel, seq_len: int, positions: torch.Tensor, *, in_place: bool = False):
    """``_recompute_masks`` (or ``_in_place_masks``) as the model takes them: one 4-D mask, or one
    per layer type (hybrid models)."""
    build = _in_place_masks if in_place else _recompute_masks
    masks = build(lm.spec, seq_len, positions, lm.model.config._attn_implementation)
    if len(masks) == 1:
        return next(iter(masks.values())).to(lm.device)
    return {name: m.to(lm.device) for name, m in masks.items()}


@torch.no_grad()  # not inference mode: callers mask the shares in place
def attention_to_cache(lm: LoadedModel, cache: KVCache, query_ids: torch.Tensor) -> torch.Tensor:
    """``[seq_len]``: how much the tokens ``query_ids [1, m]`` that follow ``cache`` read each cached position.

    Per layer, each position's share of the attention the queries (all heads) give positions
    ``1..`` (position 0, the attention sink, takes much of it and says nothing about the context),
    summed over layers. What a context's last tokens read is what its continuation will read (the
    observation window of SnapKV, Li et al., 2024). ``cache`` must hold every position in every
    layer (as for ``recompute_positions``). The weights are recomputed in a hook from each attention
    module's own query projection, norm and RoPE by the architecture's eager attention, so the
    forward pass keeps whatever attention implementation the model runs with.
    """
    seq_len, count = cache.seq_len, query_ids.shape[-1]
    positions = torch.arange(seq_len, seq_len + count)
    model_cache = DynamicCache(ddp_cache_data=_model_layers(lm, cache))
    shares = torch.zeros(seq_len)

    def record(module, args, kwargs, output) -> None:
        weights = _attention_weights(module, kwargs, model_cache.layers[module.layer_idx])
        shares.add_(_read_shares(weights, seq_len).sum(0))

    decoder = lm.model.get_decoder()
    hooks = [layer.self_attn.register_forward_hook(record, with_kwargs=True) for layer in decoder.layers]
    try:
        decoder(
            input_ids=_as_batch(query_ids).to(lm.device),
            position_ids=positions[None].to(lm.device),
            attention_mask=_model_mask(lm, seq_len, positions),
            cache=model_cache,
            use_cache=True,
        )
    finally:
        for hook in hooks:
            hook.remove()
    return shares


def _read_shares(weights: torch.Tensor, seq_len: int) -> torch.Tensor:
    """``[B, seq_len]``: each position's share of what the queries of ``weights [B, H, m, S]`` (all heads)
    read of positions ``1..seq_len-1``. Position 0, the attention sink, takes much of the attention
    and says nothing about the context: it gets 0."""
    read = weights[..., 1:seq_len].float().sum((1, 2)).cpu()
    shares = torch.zeros(read.shape[0], seq_len)
    shares[:, 1:] = read / read.sum(-1, keepdim=True).clamp_min(1e-12)
    return shares


def _attention_weights(module: torch.nn.Module, inputs: dict, layer) -> torch.Tensor:
    """``[B, H, m, S]`` attention probabilities of an attention module's call, from its inputs and its
    layer's cached keys/values (the fresh ones included), by the architecture's own eager attention."""
    modeling = sys.modules[type(module).__module__]
    hidden = inputs["hidden_states"]
    query = module.q_proj(hidden).view(*hidden.shape[:-1], -1, module.head_dim).transpose(1, 2)
    if hasattr(module, "q_norm"):  # Gemma-3, Qwen3: RMS norm of each query head
        query = module.q_norm(query)
    query, _ = modeling.apply_rotary_pos_emb(query, query, *inputs["position_embeddings"])
    mask = inputs["attention_mask"]
    if mask.dtype == torch.bool:  # the sdpa form: eager attention adds its mask to the logits
        mask = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)
    softcap = getattr(module, "attn_logit_softcapping", None)  # Gemma-2's eager takes it, the others ignore it
    _, weights = modeling.eager_attention_forward(
        module, query, layer.keys, layer.values, mask, scaling=module.scaling, softcap=softcap
    )
    return weights


def trim_to_windows(cache: KVCache, spec: ArchSpec) -> KVCache:
    """Drop what sliding-window layers would not keep (what is stored and shipped)."""
    keep = [spec.kept_positions(i, cache.seq_len) for i in range(cache.num_layers)]
    return replace(
        cache,
        keys=[k[:, :, max(0, k.shape[2] - n) :] for k, n in zip(cache.keys, keep, strict=True)],
        values=[v[:, :, max(0, v.shape[2] - n) :] for v, n in zip(cache.values, keep, strict=True)],
    )


def unrotate(cache: KVCache, spec: ArchSpec) -> KVCache:
    """Keys back to pre-RoPE form, each layer with its own RoPE parameters."""
    if not cache.rope_applied:
        return cache
    tables = _rope_tables(cache, spec, 0)
    keys = [
        remove_rope(k, spec.rope[i], cache.positions(i), table)
        for i, (k, table) in enumerate(zip(cache.keys, tables, strict=True))
    ]
    return replace(cache, keys=keys, rope_applied=False)


def rerotate(cache: KVCache, spec: ArchSpec, start: int = 0) -> KVCache:
    """Apply each layer's RoPE to pre-RoPE keys at positions ``start + cache.positions(layer)``."""
    if cache.rope_applied:
        raise ValueError("keys already carry RoPE; unrotate() them first")
    tables = _rope_tables(cache, spec, start)
    keys = [
        apply_rope(k, spec.rope[i], start + cache.positions(i), table)
        for i, (k, table) in enumerate(zip(cache.keys, tables, strict=True))
    ]
    return replace(cache, keys=keys, rope_applied=True)


def _rope_tables(cache: KVCache, spec: ArchSpec, start: int) -> list:
    layers = range(cache.num_layers)
    starts = [start + cache.first_position(i) for i in layers]
    lengths = [cache.kept_len(i) for i in layers]
    return layer_tables(spec.rope[: cache.num_layers], starts, lengths, cache.keys[0].device)


@torch.inference_mode()
def next_token_logits(lm: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor | list[int]) -> torch.Tensor:
    """Logits after feeding ``suffix_ids`` on top of ``cache`` (last position, float32)."""
    suffix = _as_batch(suffix_ids).to(lm.device)
    out = lm.model(input_ids=suffix, cache=to_model_cache(lm, cache), use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float()


def _pad_id(lm: LoadedModel) -> int | None:
    tok = lm.tokenizer
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


@torch.inference_mode()
def generate_with_model_cache(
    lm: LoadedModel,
    model_cache: DynamicCache,
    cached_ids: torch.Tensor,
    suffix_ids: torch.Tensor | list[int],
    *,
    max_new_tokens: int = 32,
    do_sample: bool = False,
    **generate_kwargs,
) -> torch.Tensor:
    """Continue from a loaded model cache holding ``cached_ids``; ``suffix_ids`` (>= 1 token) run natively.

    Returns only the new token ids ``[batch, n]``.
    """
    suffix = _as_batch(suffix_ids).to(lm.device)
    if suffix.shape[-1] < 1:
        raise ValueError("generation needs at least one uncached token to produce logits from")
    full = torch.cat((_as_batch(cached_ids).to(lm.device), suffix), dim=-1)
    out = lm.model.generate(
        input_ids=full,
        attention_mask=torch.ones_like(full),
        cache=model_cache,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        pad_token_id=_pad_id(lm),
        **generate_kwargs,
    )
    return out[:, full.shape[-1] :]


def generate_from_cache(
    lm: LoadedModel, cache: KVCache, suffix_ids: torch.Tensor | list[int], **generate_kwargs
) -> torch.Tensor:
    """Load ``cache`` into the model and continue generation after ``suffix_ids``."""
    return generate_with_model_cache(lm, to_model_cache(lm, cache), cache.token_ids, suffix_ids, **generate_kwargs)


@torch.inference_mode()
def generate_plain(lm: LoadedModel, token_ids: torch.Tensor | list[int], *, max_new_tokens: int = 32) -> torch.Tensor:
    """Greedy generation with the model's own prefill (the reference a cache round trip must match)."""
    ids = _as_batch(token_ids).to(lm.device)
    out = lm.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=_pad_id(lm),
    )
    return out[:, ids.shape[-1] :]
