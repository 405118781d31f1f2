"""Translation + recompute time over the target's native prefill, timing only (no scoring).

``mot eval`` times each sample between scoring runs of many conditions; this times the same
function (evaluation.time_translation) back to back on held-out samples, so the cost of each
recompute fraction can be read without the rest of the evaluation around it.

The target runs in float32, as the service and ``mot eval`` run it; the translator's matmuls use
bfloat16 where the CPU has bf16 units (``CacheTranslator.inference_rows``). For reference the probe
also times the target's own prefill under bfloat16 autocast, the cheaper native prefill a
bf16-serving target would have, and prints each cost against both.

    python reports/experiments/selection/cost_probe.py --target qwen2.5-0.5b --samples 10
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tqdm import tqdm

from mot_core.allocator import retain_freed_memory
from mot_core.benchmarks import timed_runs
from mot_core.cache_ops import prefill
from mot_core.data import pull_corpus
from mot_core.evaluation import TIMING_REPEATS, Variant, time_translation
from mot_core.loading import load_model
from mot_core.translation.objective import prepare
from mot_core.translation.recompute import OperatingPoint
from mot_core.translation.samples import cut_samples
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", help="translator dir (default: the shipped one)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--fractions", default="0.05,0.1,0.15,0.2")
    parser.add_argument("--recent", default="0", help="shares of the context recomputed from its end, per fraction")
    parser.add_argument("--seed", type=int, default=7, help="mot eval --seed 7 cuts its 1024-token samples with 1031")
    args = parser.parse_args()
    torch.set_num_threads(2)
    retain_freed_memory()
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(resolve_translator_path(args.checkpoint or f"smollm2-135m__{args.target}")).eval()
    documents = pull_corpus().texts("validation")
    samples = cut_samples(
        documents, source.tokenizer, context_tokens=args.context_tokens, count=args.samples, seed=args.seed
    )
    labels = {"pure translation": Variant()} | {
        f"recompute@{f} recent {r}": Variant(
            point=OperatingPoint(float(f), translator.card.recompute_selection, min(float(r), float(f)))
        )
        for f in args.fractions.split(",")
        for r in args.recent.split(",")
    }
    native, native_bf16, seconds = [], [], {label: [] for label in labels}
    for sample in tqdm(samples, desc="samples", unit="ctx"):
        prepared = prepare(source, target, sample, 1, translator.card.native_tail)
        native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, labels)
        native.append(native_s)
        keep = max(1, len(prepared.alignment.target_ids) - translator.card.native_tail)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # timed as time_translation times the float32 one
            ids = torch.tensor([prepared.alignment.target_ids[:keep]])
            native_bf16.append(min(timed_runs(lambda ids=ids: prefill(target, ids), TIMING_REPEATS)))
        for label, s in translate_s.items():
            seconds[label].append(s)
    prefill_s, prefill_bf16_s = statistics.median(native), statistics.median(native_bf16)
    print(
        f"{len(samples)} samples at {args.context_tokens} tokens, native prefill median {prefill_s:.3f} s "
        f"(float32), {prefill_bf16_s:.3f} s (bfloat16 autocast)"
    )
    print("| condition | seconds (median) | cost (x native prefill) | cost (x bf16 native prefill) |")
    print("|---|---|---|---|")
    for label, values in seconds.items():
        s = statistics.median(values)
        print(f"| {label} | {s:.3f} | {s / prefill_s:.3f} | {s / prefill_bf16_s:.3f} |")


if __name__ == "__main__":
    main()
