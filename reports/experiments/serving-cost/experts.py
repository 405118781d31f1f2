"""The experts of a shipped translator at 1024 tokens, dense (every expert on every token, gated,
as training computes them) against routed (each token's top-k only, ``mixture._add_routed_experts``,
as serving on a CPU does), on random standardised rows; the fastest of 5 runs each, float32.

    python reports/experiments/serving-cost/experts.py
"""

import time

import torch
import torch.nn.functional as F

from mot_core.allocator import retain_freed_memory
from mot_core.translation.mixture import _add_routed_experts
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def fastest(step, runs: int = 5) -> float:
    step()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


@torch.no_grad()
def time_experts(pair: str) -> str:
    translator = load_translator(resolve_translator_path(pair))
    layers = torch.arange(translator.w_in.shape[0])
    _, _, router, w_in, w_out = translator._layer_weights(layers)[:5]
    experts = translator.w_in.shape[1]
    primary = torch.randn(len(layers), 1020, translator.w_in.shape[2])
    top = torch.bmm(primary, router).topk(translator.top_k, dim=-1)
    weights = top.values.softmax(-1)

    def dense() -> torch.Tensor:
        gates = torch.zeros(*primary.shape[:2], experts).scatter(-1, top.indices, weights)
        h = F.gelu(torch.bmm(primary, w_in)).view(*primary.shape[:2], experts, -1) * gates[..., None]
        return torch.bmm(h.flatten(2), w_out)

    def routed() -> torch.Tensor:
        out = torch.zeros(*primary.shape[:2], w_out.shape[-1])
        return _add_routed_experts(out, primary, top.indices, weights, w_in, w_out, experts)

    error = (dense() - routed()).abs().max() / dense().abs().max()
    return f"{pair}: dense {fastest(dense):.4f} s, routed {fastest(routed):.4f} s (max relative difference {error:.1e})"


def main() -> None:
    retain_freed_memory()
    torch.manual_seed(0)
    for pair in ("smollm2-135m__gemma3-270m", "smollm2-135m__qwen2.5-0.5b"):
        print(time_experts(pair))


if __name__ == "__main__":
    main()
