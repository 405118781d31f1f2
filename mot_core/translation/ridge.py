"""Closed-form baseline: one ridge regression from all aligned source layers to all target layers.

``x = [every source layer's un-rotated K|V]`` -> ``y = [every target layer's pre-RoPE K|V]``,
``W = (XᵀX + λI)⁻¹ XᵀY`` on centred data. It is the calibration row of every evaluation and an
initialisation option; it costs about as much as the target's own prefill, which is why the
learned translator exists.
"""

from __future__ import annotations

import torch

from mot_core.translation.translator import CacheTranslator, TranslatorCard


class RidgeTranslator(CacheTranslator):
    kind = "ridge"

    def __init__(
        self, card: TranslatorCard, source_layers: int, source_width: int, target_layers: int, target_width: int
    ) -> None:
        super().__init__(card)
        self.target_shape = (target_layers, target_width)
        self.register_buffer("weight", torch.zeros(source_layers * source_width, target_layers * target_width))
        self.register_buffer("x_mean", torch.zeros(source_layers * source_width))
        self.register_buffer("y_mean", torch.zeros(target_layers * target_width))

    @classmethod
    def from_card(cls, card: TranslatorCard) -> RidgeTranslator:
        return cls(card, **card.config)

    def predict_rows(
        self, aligned: torch.Tensor, *, all_positions: bool = False, first_layer: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = aligned.reshape(aligned.shape[0], -1)
        return ((x - self.x_mean) @ self.weight + self.y_mean).reshape(-1, *self.target_shape)


class RidgeFitter:
    """Accumulates XᵀX and XᵀY in float64 over batches of rows, then solves once."""

    def __init__(self, source_dim: int, target_dim: int) -> None:
        self.xtx = torch.zeros(source_dim, source_dim, dtype=torch.float64)
        self.xty = torch.zeros(source_dim, target_dim, dtype=torch.float64)
        self.x_sum = torch.zeros(source_dim, dtype=torch.float64)
        self.y_sum = torch.zeros(target_dim, dtype=torch.float64)
        self.rows = 0

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = x.reshape(x.shape[0], -1).float(), y.reshape(y.shape[0], -1).float()
        self.xtx += (x.T @ x).double()  # per-batch products in float32 (fast), sums across batches in float64
        self.xty += (x.T @ y).double()
        self.x_sum += x.sum(0).double()
        self.y_sum += y.sum(0).double()
        self.rows += x.shape[0]

    def solve(self, alpha: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(weight, x_mean, y_mean)``; λ = ``alpha`` x the mean feature variance (scale-free)."""
        if self.rows < 2:
            raise ValueError("ridge needs at least two rows")
        x_mean, y_mean = self.x_sum / self.rows, self.y_sum / self.rows
        xtx = self.xtx - self.rows * torch.outer(x_mean, x_mean)
        xty = self.xty - self.rows * torch.outer(x_mean, y_mean)
        ridge = alpha * xtx.diagonal().mean().clamp_min(1e-12)
        weight = torch.linalg.solve(xtx + ridge * torch.eye(xtx.shape[0], dtype=xtx.dtype), xty)
        return weight.float(), x_mean.float(), y_mean.float()
