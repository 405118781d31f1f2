"""Translation + recompute time over the target's native prefill, timing only (no scoring).

``mot eval`` times each sample between scoring runs of many conditions; this times the same
function (evaluation.time_translation) back to back on held-out samples, so the cost of each
recompute fraction can be read without the rest of the evaluation around it.

    python reports/experiments/selection/cost_probe.py --target qwen2.5-0.5b --samples 10
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tqdm import tqdm

from mot_core.data import pull_corpus
from mot_core.evaluation import time_translation
from mot_core.loading import load_model
from mot_core.translation.objective import prepare
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
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(resolve_translator_path(args.checkpoint or f"smollm2-135m__{args.target}")).eval()
    documents = pull_corpus().texts("validation")
    samples = cut_samples(documents, source.tokenizer, context_tokens=args.context_tokens, count=args.samples, seed=7)
    labels = {"pure translation": None} | {f"recompute@{f}": float(f) for f in args.fractions.split(",")}
    native, seconds = [], {label: [] for label in labels}
    for sample in tqdm(samples, desc="samples", unit="ctx"):
        prepared = prepare(source, target, sample, 1, translator.card.native_tail)
        native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, labels)
        native.append(native_s)
        for label, s in translate_s.items():
            seconds[label].append(s)
    prefill_s = statistics.median(native)
    print(f"{len(samples)} samples at {args.context_tokens} tokens, native prefill median {prefill_s:.3f} s")
    print("| condition | seconds (median) | cost (x native prefill) |\n|---|---|---|")
    for label, values in seconds.items():
        print(f"| {label} | {statistics.median(values):.3f} | {statistics.median(values) / prefill_s:.3f} |")


if __name__ == "__main__":
    main()
