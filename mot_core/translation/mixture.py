"""The learned Mixture-of-Translators for one (source, target) pair.

For each target layer: ``mixes`` learned softmax mixtures over all source layers of the aligned,
un-rotated, standardised source rows (which source depths feed which target depth is learned,
not fixed), then a linear map from all of them plus a mixture of small MLP experts (on the first
mixture) chosen per token by a top-k router, predicting the target layer's standardised pre-RoPE
K|V row. One mixture averages the source layers into a single row, which loses what they hold
apart; a few mixtures keep more of it for a few more multiply-adds (a ridge map over all 30
source layers keeps all of it, at about the price of the target's prefill). Everything is
batched over target layers; sliding-window target layers are computed only for the positions
the target keeps. Cost per token is a few million multiply-adds, a small fraction of a
transformer layer stack, which is the point.

With ``first_layer_input`` the target's own layer-0 rows of each token (exact on any text: layer 0
sees only its token; ``features.first_layer_rows``) are one more linear input per target layer,
and layer 0 itself is emitted as is (unless not ``exact_first_layer``: then it is predicted like
the others, which a translator trained before the input had learnt to do in concert with them).
What the source rows carry about a target token is an average over the source tokens its
characters overlap; what a value row needs first is the target's own token, and out of the
training register that is where the values break (``reports/experiments/token-features/``).
Trained end to end it has not yet helped (``reports/experiments/first-layer-input/``); it is
off by default and in no shipped translator.

With ``context_heads`` a few heads of causal attention over the context's positions
(``context_attention.ContextAttention``) are one more linear input per target layer, so that a
position's rows can draw on earlier positions' source rows, which nothing else here reads.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from mot_core.translation.context_attention import ContextAttention
from mot_core.translation.translator import CacheTranslator, TranslatorCard, serving_dtype

# Serving on a CPU runs every matmul over a multiple of this many rows: the context's rows, and each
# expert's group of tokens. A bfloat16 matmul on a CPU builds a oneDNN kernel for each new shape,
# and both row counts differ with every context: building them took 0.11-0.20 s of each new
# context's translation (Gemma-3, 1024 tokens, 2-core Intel Xeon with AMX), where the same context
# translated again takes 0.12 s (reports/experiments/serving-cost, "A new context's translation").
ROW_BUCKET = 64


class MixtureTranslator(CacheTranslator):
    kind = "mixture"

    def __init__(
        self,
        card: TranslatorCard,
        source_layers: int,
        source_width: int,
        target_layers: int,
        target_width: int,
        target_windows: list[int | None],
        experts: int = 4,
        top_k: int = 2,
        hidden: int = 128,
        mixes: int = 1,
        first_layer_input: bool = False,
        exact_first_layer: bool = True,
        context_heads: int = 0,
    ) -> None:
        super().__init__(card)
        self.top_k, self.target_windows = top_k, list(target_windows)
        self.exact_first_layer = first_layer_input and exact_first_layer
        lt, ls, fs, ft = target_layers, source_layers, source_width, target_width
        self.layer_logits = nn.Parameter(_spread_mixtures(lt, mixes, ls))
        self.base = nn.Parameter(torch.zeros(lt, mixes, fs, ft))
        self.base_bias = nn.Parameter(torch.zeros(lt, ft))
        self.router = nn.Parameter(torch.randn(lt, fs, experts) * 0.02)
        self.w_in = nn.Parameter(torch.randn(lt, experts, fs, hidden) / math.sqrt(fs))
        self.w_out = nn.Parameter(torch.zeros(lt, experts, hidden, ft))
        # standardisation of inputs (per source layer) and outputs (per target layer), from data
        self.register_buffer("source_mean", torch.zeros(ls, fs))
        self.register_buffer("source_std", torch.ones(ls, fs))
        self.register_buffer("target_mean", torch.zeros(lt, ft))
        self.register_buffer("target_std", torch.ones(lt, ft))
        if first_layer_input:  # zero: adding the input to a trained translator changes nothing (but an exact layer 0)
            self.first_layer_map = nn.Parameter(torch.zeros(lt, ft, ft))
            self.register_buffer("first_layer_mean", torch.zeros(ft))
            self.register_buffer("first_layer_std", torch.ones(ft))
        if context_heads:  # zero map: adding the block to a trained translator changes nothing
            self.context = ContextAttention(ls, fs, context_heads)
            self.context_map = nn.Parameter(torch.zeros(lt, self.context.width, ft))
        # serving copies of the weights, output scale folded in: (state, {(layers, dtype): weights})
        self._cast: tuple[tuple, dict] | None = None

    @classmethod
    def from_card(cls, card: TranslatorCard) -> MixtureTranslator:
        return cls(card, **card.config)

    @property
    def mixes(self) -> int:
        return self.layer_logits.shape[1]

    def with_mixes(self, mixes: int) -> MixtureTranslator:
        """A copy with ``mixes`` mixtures per target layer that computes exactly what this one does
        (the new mixtures start peaked at spread source depths, ``_spread_mixtures``, with zero weight in
        the linear map), to fine-tune from."""
        if mixes < self.mixes:
            raise ValueError(f"cannot drop mixtures ({self.mixes} -> {mixes})")
        kept = (slice(None), slice(self.mixes))
        return self._grown("mixes", mixes, {"layer_logits": kept, "base": kept})

    @property
    def hidden(self) -> int:
        return self.w_in.shape[-1]

    def with_hidden(self, hidden: int) -> MixtureTranslator:
        """A copy whose experts are ``hidden`` wide that computes exactly what this one does (the new
        units read like fresh ones and write nothing yet: their output rows are zero), to fine-tune from."""
        if hidden < self.hidden:
            raise ValueError(f"cannot narrow the experts ({self.hidden} -> {hidden})")
        return self._grown(
            "hidden", hidden, {"w_in": (..., slice(self.hidden)), "w_out": (..., slice(self.hidden), slice(None))}
        )

    def _grown(self, key: str, size: int, kept: dict[str, tuple]) -> MixtureTranslator:
        """A fresh module with ``config[key] = size`` holding this one's tensors: those named in
        ``kept`` in the part that index selects (the rest as a fresh module has it: zero output
        weights, so the new part adds nothing yet), the others whole."""
        card = copy.deepcopy(self.card)
        card.config[key] = size
        grown = MixtureTranslator.from_card(card).to(self.base.device)
        state = self.state_dict()
        with torch.no_grad():
            for name, tensor in grown.state_dict().items():
                tensor[kept.get(name, ...)] = state[name]
        return grown

    @property
    def experts(self) -> int:
        return self.w_in.shape[1]

    def with_top_k(self, top_k: int) -> MixtureTranslator:
        """A copy whose router sends each token to its ``top_k`` best experts (gates renormalised
        over them), the weights unchanged: to serve with fewer experts than it was trained with.
        On a CPU the experts run per token on its chosen ones only (``_add_routed_experts``), so
        k=1 halves their multiply-adds; whether quality holds is a question for ``mot eval``. The
        card names the trained translator's version (``recipe["rerouted"]``) and keeps its
        training-time metrics under ``parent`` (measured at the k it was trained with), however
        often it is rerouted."""
        if not 1 <= top_k <= self.experts:
            raise ValueError(f"top_k must be between 1 and the {self.experts} experts, not {top_k}")
        card = self.card
        trained = card.recipe.get("rerouted", {}).get("from", card.version)
        metrics = card.metrics["parent"] if "rerouted" in card.recipe else card.metrics
        rerouted = copy.deepcopy(self)
        rerouted.top_k = rerouted.card.config["top_k"] = top_k
        rerouted.card.recipe["rerouted"] = {"from": trained, "top_k": top_k}
        rerouted.card.metrics = {"parent": copy.deepcopy(metrics)}
        return rerouted

    @property
    def reads_first_layer(self) -> bool:
        return hasattr(self, "first_layer_map")

    def with_first_layer_input(self, first_layer_rows: torch.Tensor, *, exact: bool = True) -> MixtureTranslator:
        """A copy that also reads the target's layer-0 rows, standardised by the statistics of
        ``first_layer_rows [N, Ft]``; it computes what this one does except layer 0, which becomes
        the target's own if ``exact`` (to fine-tune from)."""
        if self.reads_first_layer:
            return self
        wider = self._with_input(first_layer_input=True, exact_first_layer=exact)
        wider.first_layer_mean.copy_(first_layer_rows.mean(0))
        wider.first_layer_std.copy_(first_layer_rows.std(0).clamp_min(1e-4))
        return wider

    @property
    def reads_context(self) -> bool:
        return hasattr(self, "context_map")

    def with_context_attention(self, heads: int) -> MixtureTranslator:
        """A copy with ``heads`` heads of causal attention over the context (``ContextAttention``)
        that computes exactly what this one does (its output map is zero), to fine-tune from."""
        if self.reads_context:
            raise ValueError("this translator already attends over its context")
        return self._with_input(context_heads=heads)

    def context_parameters(self) -> list[nn.Parameter]:
        """The context attention's parameters (its block and map), which ``mot train`` may give a rate of their own."""
        return [*self.context.parameters(), self.context_map] if self.reads_context else []

    def _with_input(self, **config) -> MixtureTranslator:
        """A fresh module with ``config`` added to its card, holding this one's tensors: the new input's
        map starts at zero, so it computes what this one does."""
        card = copy.deepcopy(self.card)
        card.config.update(config)
        wider = MixtureTranslator.from_card(card).to(self.base.device)
        wider.load_state_dict(self.state_dict(), strict=False)
        return wider

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before ``mixes`` hold one mixture per target layer without its axis
        for name in ("layer_logits", "base"):
            key = prefix + name
            if key in state_dict and state_dict[key].dim() == getattr(self, name).dim() - 1:
                state_dict[key] = state_dict[key].unsqueeze(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _layer_weights(self, layers: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The weights of target ``layers`` in the layout ``_layers`` multiplies them in:
        ``bias [l, Ft]``, ``base [l, M, Fs, Ft]``, ``router [l, Fs, E]``, ``w_in [l, Fs, E*H]``,
        ``w_out [l, E*H, Ft]``, then the maps of the extra inputs (``_extra_inputs``): when it reads
        the target's layer 0, ``first_layer_map [l, Ft, Ft]``; when it attends over the context,
        ``context_map [l, C, Ft]``."""
        count, (experts, width, hidden) = len(layers), self.w_in.shape[1:]
        w_in = self.w_in[layers].permute(0, 2, 1, 3).reshape(count, width, experts * hidden)
        w_out = self.w_out[layers].reshape(count, experts * hidden, -1)
        weights = (self.base_bias[layers], self.base[layers], self.router[layers], w_in, w_out)
        return weights + tuple(extra[layers] for extra in self._extra_maps())

    def _extra_maps(self) -> list[nn.Parameter]:
        """The maps of the inputs besides the source rows, in the order ``_extra_inputs`` gives them."""
        maps = [self.first_layer_map] if self.reads_first_layer else []
        return maps + [self.context_map] if self.reads_context else maps

    def _serving_weights(self, layers: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``_layer_weights`` for serving: the target's output scale and mean folded into the maps
        that write the rows (``bias * std + mean``, ``map * std``), so the rows come out in the
        target's units with no pass over them, and kept between calls in the autocast dtype.

        Gathering, laying out and casting the ~50 MB of weights on every call cost ~0.015 s of a
        Gemma-3 translation at 1024 tokens on the 2-core reference CPU, and the scale folded in
        saves a pass over the rows. The copy is remade when a parameter or buffer (the scale)
        changes in place (its version counter) or moves (its storage). A translator loaded under
        ``torch.inference_mode`` has no version counters to read, so nothing tells a change: its
        serving weights are made afresh on every call.
        """
        device = layers.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else self.base.dtype
        tensors = (*self.parameters(), *self.buffers())
        if any(t.is_inference() for t in tensors):
            kept = (None, {})  # made for this call only: nothing would tell a later call it is stale
        else:
            state = tuple((t._version, t.data_ptr()) for t in tensors)
            kept = self._cast
            if kept is None or kept[0] != state:
                kept = self._cast = (state, {})  # replaced whole: a concurrent call keeps the one it read
        key = (tuple(layers.tolist()), dtype)
        weights = kept[1].get(key)
        if weights is None:
            bias, base, router, w_in, w_out, *extra_maps = self._layer_weights(layers)
            std, mean = self.target_std[layers], self.target_mean[layers]
            bias = bias * std + mean
            base, w_out = base * std[:, None, None], w_out * std[:, None]
            extra_maps = [w * std[:, None] for w in extra_maps]
            weights = (bias, *(w.to(dtype) for w in (base, router, w_in, w_out, *extra_maps)))
            kept[1][key] = weights
        return weights

    def _layers(self, mixed: torch.Tensor, layers: torch.Tensor, extra_inputs: list[torch.Tensor]) -> torch.Tensor:
        """``mixed [l, M, T, Fs]`` (and the ``_extra_inputs``, each ``[T, *]``) for target ``layers``
        -> rows ``[l, T, Ft]`` in the target's units.

        Layer-major throughout, so every product is a batched matmul over target layers with no
        transposed copy of ``mixed`` (at 1024 tokens it is ~150 MB: copying it cost more than the
        matmuls). Training runs every expert on every token, gated, in one matmul; serving on a CPU
        runs each token's chosen ones (``routes_experts``).
        """
        count, mixes, seq_len, _ = mixed.shape
        serving = not torch.is_grad_enabled()
        weights = self._serving_weights(layers) if serving else self._layer_weights(layers)
        bias, base, router, w_in, w_out, *extra_maps = weights
        out = bias[:, None].expand(count, seq_len, -1)
        for m in range(mixes):
            out = torch.baddbmm(out, mixed[:, m], base[:, m])
        for extra, extra_map in zip(extra_inputs, extra_maps, strict=True):
            out = torch.baddbmm(out, extra.expand(count, -1, -1), extra_map)
        primary = mixed[:, 0]  # [l, T, Fs]
        gate_logits = torch.bmm(primary, router)  # [l, T, E]
        top_val, top_idx = gate_logits.topk(self.top_k, dim=-1)
        if serving and routes_experts(primary.device):
            return _add_routed_experts(out, primary, top_idx, top_val.softmax(-1), w_in, w_out, gate_logits.shape[-1])
        gates = torch.zeros_like(gate_logits).scatter(-1, top_idx, top_val.softmax(-1))  # k nonzero per token
        experts = gates.shape[-1]
        h = F.gelu(torch.bmm(primary, w_in))
        gated = (h.view(count, seq_len, experts, -1) * gates[..., None]).view(count, seq_len, -1)
        out = torch.baddbmm(out, gated, w_out)
        if serving:  # the output scale is in the serving weights
            return out
        return out * self.target_std[layers, None] + self.target_mean[layers, None]

    def _standardised_layer_major(self, aligned: torch.Tensor, padded: int) -> torch.Tensor:
        """``aligned [T, Ls, Fs]`` standardised, as ``[Ls, padded, Fs]`` contiguous (rows past ``T``
        are padding, whose rows the caller drops; autograd takes ``padded == T``).

        Without autograd, subtracting straight into the layer-major layout and dividing in place
        makes one pass over the ~50 MB of rows at 1024 tokens instead of three (0.016 s against
        0.058 s on the 2-core reference CPU); the values are the same bits either way. ``align_rows``
        stores the rows layer-major, so the subtraction reads them in order.
        """
        mean, std = self.source_mean[:, None], self.source_std[:, None]
        seq_len, layers, width = aligned.shape
        if torch.is_grad_enabled():
            return ((aligned.transpose(0, 1) - mean) / std).contiguous()
        out = aligned.new_empty(layers, padded, width)
        out[:, seq_len:] = 0.0
        torch.sub(aligned.transpose(0, 1), mean, out=out[:, :seq_len])
        return out.div_(std)

    def predict_rows(
        self, aligned: torch.Tensor, *, all_positions: bool = False, first_layer: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Aligned source rows ``[T, Ls, Fs]`` -> pre-RoPE target rows ``[T, Lt, Ft]``.

        Rows a sliding-window layer will not keep are left at zero (never loaded by the target)
        unless ``all_positions`` (selective recompute needs each recomputed token's whole window).
        ``first_layer [T, Ft]``: the target's own layer-0 rows, which a translator that reads them needs.
        """
        seq_len = aligned.shape[0]
        if self.reads_first_layer and (first_layer is None or first_layer.shape[0] != seq_len):
            raise ValueError(f"this translator reads the target's layer-0 rows of all {seq_len} tokens")
        padded = _serving_rows(seq_len, aligned.device)
        x = self._standardised_layer_major(aligned, padded)  # [Ls, padded, Fs]
        padded_first_layer = None if first_layer is None else F.pad(first_layer, (0, 0, 0, padded - seq_len))
        extra_inputs = self._extra_inputs(x, padded_first_layer)  # each [padded, *]
        mix = self.layer_logits.softmax(-1)  # [Lt, M, Ls]
        target_layers, target_width = self.target_mean.shape
        rows = None  # [Lt, T, Ft]
        exact = {0} if self.exact_first_layer else set()  # layers the target gives exactly
        kept_of = [seq_len if w is None or all_positions else min(seq_len, w - 1) for w in self.target_windows]
        for kept in sorted(set(kept_of), reverse=True):  # the layers that keep the same positions, together
            predicted = [i for i, k in enumerate(kept_of) if k == kept and i not in exact]
            if not predicted:
                continue
            layers = torch.tensor(predicted, device=x.device)
            # a layer that keeps every position reads the padding too (a row depends on no later one)
            span = slice(0, padded) if kept == seq_len else slice(seq_len - kept, seq_len)
            source = x[:, span]
            weights = mix[layers].reshape(-1, source.shape[0])  # [l*M, Ls]
            mixed = (weights @ source.reshape(source.shape[0], -1)).view(len(layers), self.mixes, source.shape[1], -1)
            pred = self._layers(mixed, layers, [e[span] for e in extra_inputs])[:, :kept].to(aligned.dtype)
            if len(predicted) == target_layers and kept == seq_len:
                rows = pred  # every layer, every position (no sliding layers, or all_positions): no copy
                continue
            if rows is None:
                rows = aligned.new_zeros(target_layers, seq_len, target_width)
            positions = torch.arange(seq_len - kept, seq_len, device=x.device)
            rows = rows.index_put((layers[:, None], positions[None]), pred)
        if self.exact_first_layer:  # layer 0 sees only its token: the target's own rows are exact
            rows = aligned.new_zeros(target_layers, seq_len, target_width) if rows is None else rows
            rows = rows.index_put((torch.tensor([0], device=x.device),), first_layer.to(rows.dtype)[None])
        return rows.transpose(0, 1)  # written layer-major (contiguous writes), read as [T, Lt, Ft]

    @torch.no_grad()
    def warm_up_shapes(self, up_to_tokens: int) -> int:
        """``inference_rows`` on zeros at every row count (``_serving_rows``) of contexts up to
        ``up_to_tokens`` tokens, where a new matmul shape builds its bfloat16 kernels (a CPU with
        bfloat16 matmuls): ~30 ms per new count for each shipped translator, which the first
        context of each size paid. Zeros send every token to the same experts, so each count also
        runs the experts' products over that many rows, the shapes of smaller contexts' expert groups."""
        device = self.source_mean.device
        if not (routes_experts(device) and serving_dtype(device.type) == torch.bfloat16):
            return 0
        counts = range(ROW_BUCKET, _serving_rows(up_to_tokens, device) + 1, ROW_BUCKET)
        all_positions = self.serves_all_positions
        target_width = self.target_mean.shape[-1]
        for rows in counts:
            aligned = self.source_mean.new_zeros(rows, *self.source_mean.shape)
            first_layer = self.target_mean.new_zeros(rows, target_width) if self.reads_first_layer else None
            self.inference_rows(aligned, all_positions=all_positions, first_layer=first_layer)
        return len(counts)

    def _extra_inputs(self, source: torch.Tensor, first_layer: torch.Tensor | None) -> list[torch.Tensor]:
        """The inputs of every target layer besides the source mixtures, each ``[T, *]``: the
        target's standardised layer-0 rows, if it reads them, then the context attention's output
        over the standardised source rows ``source [Ls, T, Fs]``, if it has one."""
        inputs = []
        if self.reads_first_layer:
            inputs.append((first_layer.to(source.dtype) - self.first_layer_mean) / self.first_layer_std)
        if self.reads_context:
            inputs.append(self.context(source))
        return inputs


def _serving_rows(seq_len: int, device: torch.device) -> int:
    """How many rows ``predict_rows`` computes for ``seq_len`` tokens: serving where it routes the
    experts (a CPU, ``routes_experts``) rounds up to a multiple of ``ROW_BUCKET``, so that its
    matmuls see the same few shapes context after context (a new one costs a bfloat16 kernel build);
    autograd and GPUs compute exactly ``seq_len``."""
    if torch.is_grad_enabled() or not routes_experts(device):
        return seq_len
    return -(-seq_len // ROW_BUCKET) * ROW_BUCKET


def routes_experts(device: torch.device) -> bool:
    """Whether serving runs each token's chosen experts only (``_add_routed_experts``, which says
    why): on a CPU, in float32 and bfloat16 alike; a GPU keeps the dense product.

    Gemma-3's translator (top-1 of 4) at 1024 tokens on a 2-core CPU with bfloat16 matmuls: its
    experts 0.044 s dense against 0.037 s routed, its ``translate()`` 0.012x of the target's prefill
    cheaper (reports/experiments/serving-cost/, "Routed experts on a CPU with bfloat16 too").
    """
    return device.type == "cpu"


def _add_routed_experts(
    out: torch.Tensor,
    primary: torch.Tensor,
    top_idx: torch.Tensor,
    top_weights: torch.Tensor,
    w_in: torch.Tensor,
    w_out: torch.Tensor,
    experts: int,
) -> torch.Tensor:
    """``out [l, T, Ft]`` plus each token's ``top_idx [l, T, k]`` experts only (``top_weights``
    their gates), in place: what ``_layers``' dense product computes, to float rounding, with k/E
    of its expert multiply-adds.

    The dense product runs every expert on every token and zeroes the unchosen ones, which suits a
    GPU (a few large kernels, no gathers) and autograd. On a CPU the multiply-adds are the time: on
    a 2-core AVX2 CPU without bfloat16 (allocator tuned), 2 of 4 experts take Gemma-3's at 1024
    tokens from 0.116 s to 0.093 s and Qwen2.5's from 0.109 s to 0.097 s
    (reports/experiments/serving-cost/experts.txt). Per target layer the (token, expert) pairs are
    sorted by expert, so that each expert is one matmul over its tokens.
    """
    count, _, top_k = top_idx.shape
    w_in = w_in.view(count, w_in.shape[1], experts, -1)  # [l, Fs, E, H]
    w_out = w_out.view(count, experts, -1, w_out.shape[-1])  # [l, E, H, Ft]
    spare = torch.zeros(ROW_BUCKET, dtype=torch.long, device=top_idx.device)
    for layer in range(count):
        chosen = top_idx[layer].reshape(-1)
        order = chosen.argsort(stable=True)
        tokens = order // top_k
        # each expert's product runs over a multiple of ROW_BUCKET rows (the rows after its own
        # group, or spare ones at the end), of which it keeps its own
        rows = primary[layer].index_select(0, torch.cat((tokens, spare)))
        gates = F.pad(top_weights[layer].reshape(-1)[order], (0, ROW_BUCKET))[:, None]
        parts, start = [], 0
        for expert, size in enumerate(torch.bincount(chosen, minlength=experts).tolist()):
            if size:
                run = slice(start, start + -(-size // ROW_BUCKET) * ROW_BUCKET)
                h = F.gelu(rows[run] @ w_in[layer, :, expert]) * gates[run]
                parts.append((h @ w_out[layer, expert])[:size])
            start += size
        out[layer].index_add_(0, tokens, torch.cat(parts).to(out.dtype))
    return out


def _spread_mixtures(target_layers: int, mixes: int, source_layers: int) -> torch.Tensor:
    """Initial mixture logits ``[Lt, M, Ls]``: the first mixture uniform, the others peaked at
    evenly spaced source depths, so that they differ from the start (identical mixtures with a
    zero linear map would get identical gradients and stay identical)."""
    depth = torch.arange(source_layers, dtype=torch.float32)
    centres = (torch.arange(1, mixes) - 0.5) * source_layers / max(mixes - 1, 1)
    width = source_layers / (2 * max(mixes - 1, 1))
    bumps = -0.5 * ((depth[None] - centres[:, None]) / width) ** 2  # [M-1, Ls]
    logits = torch.cat((torch.zeros(1, source_layers), bumps))
    return logits[None].expand(target_layers, -1, -1).clone()
