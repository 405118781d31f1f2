"""Copying the aligned rows of target tokens that are one whole source token, instead of the
sparse product over every row (stop 51, measured, not kept): the same bits, timed alone and
inside ``CacheTranslator.translate``, alternating A B B A per context.

    python reports/experiments/serving-cost/align_copy.py -t gemma3-270m --samples 8
"""

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402
from cost import VALIDATION  # noqa: E402
from parts import translating  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

import mot_core.translation.translator as translator_module  # noqa: E402
from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.benchmarks import timed_runs  # noqa: E402
from mot_core.translation.features import align_rows, kv_rows  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402


def copied_rows(source_rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``align_rows`` with the rows of one whole source token (weight 1) copied, the others mixed."""
    t_s, layers, width = source_rows.shape
    flat = source_rows.reshape(t_s, layers * width)
    weights = weights.to(flat.dtype).coalesce()
    (rows, cols), values, t_t = weights.indices(), weights.values(), weights.shape[0]
    copied = torch.bincount(rows, minlength=t_t) == 1
    copied[rows[values != 1]] = False
    index = torch.zeros(t_t, dtype=torch.long)
    index[rows] = cols
    mixed = flat.index_select(0, index)
    others = (~copied).nonzero().squeeze(1)
    picked = ~copied[rows]
    local = torch.searchsorted(others, rows[picked])
    part = torch.sparse_coo_tensor(
        torch.stack([local, cols[picked]]), values[picked], (len(others), t_s), check_invariants=False
    )
    mixed[others] = torch.sparse.mm(part.coalesce(), flat)
    return mixed.reshape(-1, layers, width)


def timings(source, target, translator, sample, variants: dict) -> tuple[bool, dict, dict]:
    """Per variant, the fastest ``align_rows`` alone and ``translate()`` with it, run A B B A."""
    prepared = prepare(source, target, sample, 1, translator.card.native_tail)
    rows, weights = kv_rows(prepared.source_cache, source.spec), prepared.alignment.to_sparse()
    equal = torch.equal(align_rows(rows, weights), copied_rows(rows, weights))

    translate = translating(source, target, translator, prepared, sample.context)

    alone, inside = {k: [] for k in variants}, {k: [] for k in variants}
    for name in ("product", "copied", "copied", "product"):
        translator_module.align_rows = variants[name]
        alone[name].append(min(timed_runs(lambda fn=variants[name]: fn(rows, weights), 5)))
        inside[name].append(min(timed_runs(translate, 3)))
    translator_module.align_rows = align_rows
    return equal, alone, inside


def main() -> None:
    parser = sample_parser(__doc__, samples=8, seed=7, corpus=VALIDATION)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    variants = {"product": align_rows, "copied": copied_rows}
    alone, inside, equal = {k: [] for k in variants}, {k: [] for k in variants}, True
    for sample in corpus_samples(args, source.tokenizer):
        same, by_alone, by_inside = timings(source, target, translator, sample, variants)
        equal &= same
        for name in variants:
            alone[name] += by_alone[name]
            inside[name] += by_inside[name]
    print(f"{args.target}: the same bits on every context: {equal}")
    for name in variants:
        print(
            f"{name:<8} alone {1000 * statistics.median(alone[name]):6.1f} ms, "
            f"in translate() {1000 * statistics.median(inside[name]):6.1f} ms (medians, {len(alone[name])} timings)"
        )


if __name__ == "__main__":
    main()
