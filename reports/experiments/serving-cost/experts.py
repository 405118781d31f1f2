"""The experts of a shipped translator at 1024 tokens, dense (every expert on every token, gated,
as training computes them) against routed (each token's top-k only, ``mixture._add_routed_experts``,
as serving on a CPU does): alone on random standardised rows, the fastest of 7 runs each, in
float32 and, where the CPU has its matmuls, bfloat16; then inside ``CacheTranslator.translate``
on ``--samples`` validation contexts (the dtype the CPU serves in, ``mixture.routes_experts``
switched off for dense), alternating A B B A per context.

    python reports/experiments/serving-cost/experts.py -t gemma3-270m --samples 8
"""

import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION  # noqa: E402
from parts import translating  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.mixture as mixture  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.benchmarks import timed_runs  # noqa: E402
from mot_core.cache_ops import prefill  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.translator import serving_dtype  # noqa: E402

routes = mixture.routes_experts  # what serving runs; inside_translate switches it off for dense


@torch.no_grad()
def experts_alone(translator, dtype: torch.dtype) -> str:
    layers = torch.arange(translator.w_in.shape[0])
    _, _, router, w_in, w_out = (w.to(dtype) for w in translator._layer_weights(layers)[:5])
    experts = translator.w_in.shape[1]
    primary = torch.randn(len(layers), 1020, translator.w_in.shape[2]).to(dtype)
    top = torch.bmm(primary, router).topk(translator.top_k, dim=-1)
    weights = top.values.softmax(-1)

    def dense() -> torch.Tensor:
        gates = torch.zeros(*primary.shape[:2], experts, dtype=dtype).scatter(-1, top.indices, weights)
        h = F.gelu(torch.bmm(primary, w_in)).view(*primary.shape[:2], experts, -1) * gates[..., None]
        return torch.bmm(h.flatten(2), w_out)

    def routed() -> torch.Tensor:
        out = torch.zeros(*primary.shape[:2], w_out.shape[-1], dtype=dtype)
        return mixture._add_routed_experts(out, primary, top.indices, weights, w_in, w_out, experts)

    error = (dense() - routed()).float().abs().max() / dense().float().abs().max()
    dense_s, routed_s = min(timed_runs(dense, 7)), min(timed_runs(routed, 7))
    return f"{str(dtype)[6:]:<8} dense {dense_s:.4f} s, routed {routed_s:.4f} s (max relative difference {error:.1e})"


def inside_translate(source, target, translator, sample) -> tuple[dict, float]:
    """The fastest ``translate()`` per variant, run A B B A, the target's prefill of the same
    context, and the routed rows' relative difference."""
    prepared = prepare(source, target, sample, 1, translator.card.native_tail)
    translate = translating(source, target, translator, prepared, sample.context)
    native_ids = prepared.target_ids[:, : prepared.keep]
    times, keys = {"dense": [], "routed": [], "prefill": [min(timed_runs(lambda: prefill(target, native_ids), 3))]}, {}
    for name in ("dense", "routed", "routed", "dense"):
        mixture.routes_experts = (lambda device: False) if name == "dense" else routes
        times[name].append(min(timed_runs(translate, 3)))
        if name not in keys:  # the rows of each variant, once
            keys[name] = torch.cat(translate().cache.keys, dim=-2)
    mixture.routes_experts = routes
    difference = float((keys["dense"] - keys["routed"]).abs().max() / keys["dense"].abs().max())
    return {name: min(t) for name, t in times.items()}, difference


def main() -> None:
    parser = sample_parser(__doc__, samples=8, seed=7, corpus=VALIDATION)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    torch.manual_seed(0)
    source, target, translator = models_and_translator(args)
    served = serving_dtype("cpu")
    print(f"{args.target}: top-{translator.top_k} of {translator.w_in.shape[1]} experts; serving dtype {served}")
    for dtype in sorted({torch.float32, served}, key=str, reverse=True):
        print("alone   ", experts_alone(translator, dtype))
    by_variant, differences = {"dense": [], "routed": [], "prefill": []}, []
    for sample in corpus_samples(args, source.tokenizer):
        times, difference = inside_translate(source, target, translator, sample)
        differences.append(difference)
        for name, seconds in times.items():
            by_variant[name].append(seconds)
    routed_saves = [
        (d - r) / p for d, r, p in zip(by_variant["dense"], by_variant["routed"], by_variant["prefill"], strict=True)
    ]
    print(
        f"in translate() ({len(routed_saves)} contexts, medians):"
        f" dense {1000 * statistics.median(by_variant['dense']):.1f} ms,"
        f" routed {1000 * statistics.median(by_variant['routed']):.1f} ms, native prefill"
        f" {statistics.median(by_variant['prefill']):.3f} s; routed saves {statistics.median(routed_saves):.4f}x of the"
        f" prefill (per context {min(routed_saves):.4f}x to {max(routed_saves):.4f}x);"
        f" keys' max relative difference {max(differences):.1e}"
    )


if __name__ == "__main__":
    main()
