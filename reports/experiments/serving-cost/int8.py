"""Probe (exploration, not in ``mot_core``): the translator's matmuls in int8 on a CPU without bfloat16.

On a CPU with bfloat16 matmuls the translator serves under autocast (what the acceptance runs
timed); on one without (AVX2 only) it serves in float32, and the shipped operating points cost
0.256x (Qwen2.5) and 0.269x (Gemma-3) of the prefill (``README.md``). Dynamic int8 quantisation
(per-channel int8 weights, per-call int8 activations; ``torch.ops.quantized.linear_dynamic``, what
``torch.ao.quantization.quantize_dynamic`` runs) of the linear map and the experts is the float32
CPU's counterpart of bfloat16. The router stays in float32 (its top-2 choice is discrete).

Per sample, side by side in one process: the cost of the card's operating point with the float32
translator and with the int8 one (each the fastest of ``TIMING_REPEATS`` over the fastest of as many
native prefills, as ``mot eval`` times it), the relative error of the int8 rows against the
float32 rows, and the retention and content gain of both (``../through-recompute/compare.py``).

    python reports/experiments/serving-cost/int8.py -t gemma3-270m --samples 12
"""

import json
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import content_scores, corpus_samples, score_conditions  # noqa: E402
from cost import VALIDATION  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.evaluation import Variant, time_translation  # noqa: E402
from mot_core.translation.mixture import MixtureTranslator  # noqa: E402
from mot_core.translation.objective import operating_point_cache, prepare  # noqa: E402

_float_layers = MixtureTranslator._layers
_PACKED: dict = {}  # (id(translator), layers) -> packed int8 weights


def _pack(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``weight [in, out]`` (as ``_serving_weights`` lays it out) packed for ``linear_dynamic``."""
    w = weight.t().contiguous()  # [out, in]
    scales = (w.abs().amax(1) / 127).clamp_min(1e-12).double()
    q = torch.quantize_per_channel(w, scales, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, bias)


def _linear(x: torch.Tensor, packed) -> torch.Tensor:
    return torch.ops.quantized.linear_dynamic(x, packed, True)  # reduce_range: no int16 overflow without VNNI


def _int8_layers(self, mixed, layers, tokens):
    if torch.is_grad_enabled() or tokens is not None:
        return _float_layers(self, mixed, layers, tokens)
    count, mixes, seq_len, _ = mixed.shape
    bias, base, router, w_in, w_out = self._serving_weights(layers)
    experts = self.w_in.shape[1]
    key = (id(self), tuple(layers.tolist()))
    if key not in _PACKED:
        w_in_e = w_in.view(count, w_in.shape[1], experts, -1)
        w_out_e = w_out.view(count, experts, -1, w_out.shape[-1])
        _PACKED[key] = [
            (
                [_pack(base[layer, m], bias[layer] if m == 0 else None) for m in range(mixes)],
                [_pack(w_in_e[layer, :, e]) for e in range(experts)],
                [_pack(w_out_e[layer, e]) for e in range(experts)],
            )
            for layer in range(count)
        ]
    primary = mixed[:, 0]
    top_val, top_idx = torch.bmm(primary, router).topk(self.top_k, dim=-1)
    top_weights = top_val.softmax(-1)
    out = []
    for layer, (base_packed, in_packed, out_packed) in enumerate(_PACKED[key]):
        rows = _linear(mixed[layer, 0], base_packed[0])
        for m in range(1, mixes):
            rows = rows + _linear(mixed[layer, m], base_packed[m])
        chosen = top_idx[layer].reshape(-1)
        order = chosen.argsort(stable=True)
        token_of = order // self.top_k
        picked = primary[layer].index_select(0, token_of)
        gates = top_weights[layer].reshape(-1)[order, None]
        parts, start = [], 0
        for expert, size in enumerate(torch.bincount(chosen, minlength=experts).tolist()):
            if size:
                h = F.gelu(_linear(picked[start : start + size], in_packed[expert])) * gates[start : start + size]
                parts.append(_linear(h, out_packed[expert]))
            start += size
        out.append(rows.index_add_(0, token_of, torch.cat(parts)))
    return torch.stack(out)


@contextmanager
def int8_translator():
    MixtureTranslator._layers = _int8_layers
    try:
        yield
    finally:
        MixtureTranslator._layers = _float_layers


@torch.no_grad()
def main() -> None:
    parser = sample_parser(__doc__, samples=12, seed=7, corpus=VALIDATION)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    card = translator.card
    op = {"op": Variant(point=card.operating_point)}
    costs: dict[str, list[float]] = {"float32": [], "int8": []}
    errors: list[float] = []
    samples = corpus_samples(args, source.tokenizer)
    for i, sample in enumerate(samples):
        prepared = prepare(source, target, sample, 64, card.native_tail)
        aligned = prepared.aligned_rows[: prepared.keep]
        exact = translator.inference_rows(aligned, all_positions=True)
        with int8_translator():
            errors.append(float((translator.inference_rows(aligned, all_positions=True) - exact).norm() / exact.norm()))
        for name in ("float32", "int8") if i % 2 == 0 else ("int8", "float32"):  # alternate which goes first
            with int8_translator() if name == "int8" else _nothing():
                native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, op)
            costs[name].append(translate_s["op"] / native_s)

    def conditions_of(p, other) -> dict:
        caches = {}
        for suffix, q in (("", p), ("/deranged", other)):
            caches["float32" + suffix] = operating_point_cache(translator, q, target)
            with int8_translator():
                caches["int8" + suffix] = operating_point_cache(translator, q, target)
        return caches

    nll = score_conditions(source, target, samples, card.native_tail, conditions_of)
    result = {"target": target.name, "row_error_int8": statistics.median(errors)}
    for name in ("float32", "int8"):
        result[name] = {"cost": statistics.median(costs[name]), **content_scores(nll, name)}
        print(name, json.dumps(result[name]))
    print(f"int8 rows vs float32 rows: median relative error {result['row_error_int8']:.4f}")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **result}, indent=1))


@contextmanager
def _nothing():
    yield


if __name__ == "__main__":
    main()
