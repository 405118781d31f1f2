"""The learned Mixture-of-Translators for one (source, target) pair.

For each target layer: a learned softmax mixture over all source layers of the aligned,
un-rotated, standardised source rows (which source depth feeds which target depth is learned,
not fixed), then a linear map plus a mixture of small MLP experts chosen per token by a top-k
router, predicting the target layer's standardised pre-RoPE K|V row. Everything is batched over
target layers; sliding-window target layers are computed only for the positions the target
keeps. Cost per token is a few million multiply-adds, a small fraction of a transformer layer
stack, which is the point.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mot_core.translation.translator import CacheTranslator, TranslatorCard


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
    ) -> None:
        super().__init__(card)
        self.top_k, self.target_windows = top_k, list(target_windows)
        lt, ls, fs, ft = target_layers, source_layers, source_width, target_width
        self.layer_logits = nn.Parameter(torch.zeros(lt, ls))
        self.base = nn.Parameter(torch.zeros(lt, fs, ft))
        self.base_bias = nn.Parameter(torch.zeros(lt, ft))
        self.router = nn.Parameter(torch.randn(lt, fs, experts) * 0.02)
        self.w_in = nn.Parameter(torch.randn(lt, experts, fs, hidden) / math.sqrt(fs))
        self.w_out = nn.Parameter(torch.zeros(lt, experts, hidden, ft))
        # standardisation of inputs (per source layer) and outputs (per target layer), from data
        self.register_buffer("source_mean", torch.zeros(ls, fs))
        self.register_buffer("source_std", torch.ones(ls, fs))
        self.register_buffer("target_mean", torch.zeros(lt, ft))
        self.register_buffer("target_std", torch.ones(lt, ft))

    @classmethod
    def from_card(cls, card: TranslatorCard) -> MixtureTranslator:
        return cls(card, **card.config)

    def _layers(self, mixed: torch.Tensor, layers: torch.Tensor) -> torch.Tensor:
        """``mixed [T, l, Fs]`` for target ``layers`` -> standardised rows ``[T, l, Ft]``."""
        out = torch.einsum("tlf,lfo->tlo", mixed, self.base[layers]) + self.base_bias[layers]
        gate_logits = torch.einsum("tlf,lfe->tle", mixed, self.router[layers])
        top_val, top_idx = gate_logits.topk(self.top_k, dim=-1)
        gates = torch.zeros_like(gate_logits).scatter(-1, top_idx, top_val.softmax(-1))  # [T, l, E], k nonzero
        hidden = F.gelu(torch.einsum("tlf,lefh->tleh", mixed, self.w_in[layers]))
        experts = torch.einsum("tleh,leho->tleo", hidden * gates[..., None], self.w_out[layers])
        return out + experts.sum(dim=2)

    def predict_rows(self, aligned: torch.Tensor, *, all_positions: bool = False) -> torch.Tensor:
        """Aligned source rows ``[T, Ls, Fs]`` -> pre-RoPE target rows ``[T, Lt, Ft]``.

        Rows a sliding-window layer will not keep are left at zero (never loaded by the target)
        unless ``all_positions`` (selective recompute needs each recomputed token's whole window).
        """
        seq_len = aligned.shape[0]
        x = (aligned - self.source_mean) / self.source_std
        mix = self.layer_logits.softmax(-1)  # [Lt, Ls]
        rows = aligned.new_zeros(seq_len, *self.target_mean.shape)
        for window in sorted({w for w in self.target_windows}, key=lambda w: (w is not None, w or 0)):
            layers = torch.tensor([i for i, w in enumerate(self.target_windows) if w == window], device=x.device)
            kept = seq_len if window is None or all_positions else min(seq_len, window - 1)
            mixed = torch.einsum("tsf,ls->tlf", x[seq_len - kept :], mix[layers])
            pred = self._layers(mixed, layers) * self.target_std[layers] + self.target_mean[layers]
            rows = rows.index_put((torch.arange(seq_len - kept, seq_len, device=x.device)[:, None], layers[None]), pred)
        return rows
