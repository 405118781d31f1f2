"""Probe (exploration): recompute the extra positions through the lower layers only.

The attended share buys quality out of register but costs what recomputing its tokens through
every target layer costs (``README.md``, "A free observation"). A token's keys/values at layer
``l`` need its hidden state below ``l`` only, so a recompute can stop early: the lower layers' rows
of those tokens become the target's own and the upper ones stay translated, at ``(k+1)/L`` of the
cost. Does half the depth keep most of the gain (then twice the positions would cost the same)?

Per sample, on top of the shipped operating point (``op``), the positions the source's own tail
reads most (``free_observation.source_shares``), recomputed after the operating point's recompute:
``--extra`` of the context through every layer (``all``), the same through the lower half
(``half``), and twice as many through the lower half (``half2x``, the cost of ``all``).

    python reports/experiments/attended-recompute/partial_depth.py -t gemma3-270m \
        --corpus $MOT_HOME/data/moby-dick/moby-dick.txt --samples 12 --seed 1031
"""

import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples, score_conditions  # noqa: E402
from free_observation import source_shares  # noqa: E402
from probe import probe_parser, report  # noqa: E402
from tokens import models_and_translator  # noqa: E402

import mot_core.translation.recompute as recompute  # noqa: E402
from mot_core.cache_ops import _fill_cache, _KeysValuesUpTo, _model_layers, _model_mask  # noqa: E402
from mot_core.translation.objective import operating_point_cache  # noqa: E402

EXTRA: dict = {}  # while set: "shares" [T], "count" and "last_layer" of the second recompute
_recompute_positions = recompute.recompute_positions


@torch.inference_mode()
def recompute_through(target, cache, positions: torch.Tensor, last_layer: int):
    """``cache_ops.recompute_positions`` stopped after layer ``last_layer``: the rows of ``positions``
    in layers ``0..last_layer`` become the target's own, the layers above keep theirs."""
    positions = positions.unique()
    model_cache = _KeysValuesUpTo(last_layer, ddp_cache_data=_model_layers(target, cache))
    _fill_cache(
        target,
        model_cache,
        input_ids=cache.token_ids[:, positions],
        position_ids=positions[None],
        attention_mask=_model_mask(target, cache.seq_len, positions),
    )
    keys, values = list(cache.keys), list(cache.values)
    for i in range(last_layer + 1):
        layer = model_cache.layers[i]
        keys[i], values[i] = keys[i].clone(), values[i].clone()
        keys[i][:, :, positions] = layer.keys[:, :, cache.seq_len :]
        values[i][:, :, positions] = layer.values[:, :, cache.seq_len :]
    return replace(cache, keys=keys, values=values)


def _then_extra(target, cache, positions, grad=False):
    """The operating point's recompute, then the ``EXTRA`` positions (not among its) to ``last_layer``."""
    blended = _recompute_positions(target, cache, positions, grad=grad)
    if not EXTRA:
        return blended
    shares = EXTRA["shares"].clone()
    shares[positions], shares[0] = -torch.inf, -torch.inf
    return recompute_through(target, blended, shares.topk(EXTRA["count"]).indices, EXTRA["last_layer"])


recompute.recompute_positions = _then_extra


def main() -> None:
    args = probe_parser(__doc__).parse_args()
    source, target, shipped = models_and_translator(args)
    layers = target.spec.num_layers
    settings = {"all": (1, layers - 1), "half": (1, layers // 2 - 1), "half2x": (2, layers // 2 - 1)}

    def conditions_of(p, other) -> dict:
        caches = {}
        for suffix, q in (("", p), ("/deranged", other)):
            EXTRA.clear()
            caches["op" + suffix] = operating_point_cache(shipped, q, target)
            shares = source_shares(source, q)
            for name, (times, last_layer) in settings.items():
                EXTRA.update(shares=shares, count=times * round(args.extra * q.keep), last_layer=last_layer)
                caches[name + suffix] = operating_point_cache(shipped, q, target)
        EXTRA.clear()
        return caches

    samples = corpus_samples(args, source.tokenizer)
    nll = score_conditions(source, target, samples, shipped.card.native_tail, conditions_of)
    report(args, nll, ["op", *settings])


if __name__ == "__main__":
    main()
