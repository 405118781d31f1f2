"""Retention, ridge and content gain of an eval run with a bootstrap interval over its samples.

A bar met by the point estimate can still be met by chance: the samples are resampled with
replacement and the NLL sums re-scored as the report scores them (``retention`` over summed NLL),
so the interval says how far another 200 contexts of the same text could move each number.
Reads the run's journal only; nothing is scored.

    python reports/eval-acceptance/sample_bootstrap.py \
        reports/eval-acceptance/wiki-shipped/smollm2-135m__qwen2.5-0.5b/progress.jsonl
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from mot_core.evaluation import retention
from mot_core.journal import Journal

SCORED = ("native", "none", "translated", "deranged", "ridge")


def scores(records: list[dict]) -> dict[str, float]:
    nll = {c: sum(r["conditions"][c]["nll"] for r in records) for c in SCORED}
    kept = {c: retention(nll["none"], nll[c], nll["native"]) for c in ("translated", "ridge", "deranged")}
    gain = kept["translated"] - kept["deranged"]
    return {"retention": kept["translated"], "ridge": kept["ridge"], "content gain": gain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("journal", type=Path, help="an eval run's progress.jsonl")
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--block", type=int, default=50, help="also score consecutive blocks of this many samples")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    by_key = Journal.read(args.journal).records()
    prefix = f"{args.context_tokens}:"
    keys = sorted((k for k in by_key if k.startswith(prefix)), key=lambda k: int(k.split(":")[1]))
    records = [by_key[k] for k in keys]
    if not records:
        raise SystemExit(f"no {args.context_tokens}-token samples in {args.journal}")
    rng = random.Random(args.seed)
    draws = [scores([rng.choice(records) for _ in records]) for _ in range(args.resamples)]
    point = scores(records)
    print(f"{len(records)} samples, {args.resamples} resamples, 95% interval")
    for name, value in point.items():
        ordered = sorted(d[name] for d in draws)
        low, high = ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]
        print(f"  {name:13s} {value:.3f}  [{low:.3f}, {high:.3f}]")
    for start in range(0, len(records), args.block):
        block = scores(records[start : start + args.block])
        shown = ", ".join(f"{name} {value:.3f}" for name, value in block.items())
        print(f"  samples {start}-{min(start + args.block, len(records)) - 1}: {shown}")


if __name__ == "__main__":
    main()
