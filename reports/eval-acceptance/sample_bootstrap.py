"""Retention, ridge and content gain of an eval run with a bootstrap interval over its samples.

A bar met by the point estimate can still be met by chance: the samples are resampled with
replacement and the NLL sums re-scored as the report scores them (``retention`` over summed NLL),
so the interval says how far another 200 contexts of the same text could move each number.
Reads the run's journal only; nothing is scored.

With ``--against`` another run of the same samples (another translator), the differences
(this run minus that one) on the samples both have scored, resampled in pairs: two translators
scored on the same contexts differ far less from sample to sample than either run's own interval
says, and a rule such as "no more than 0.03 below the shipped translator" is a bound on the
difference.

    python reports/eval-acceptance/sample_bootstrap.py \
        reports/eval-acceptance/wiki-shipped/smollm2-135m__qwen2.5-0.5b/progress.jsonl
    python reports/eval-acceptance/sample_bootstrap.py \
        reports/eval-acceptance/gemma3-top1/smollm2-135m__gemma3-270m/progress.jsonl \
        --against reports/eval-acceptance/smollm2-135m__gemma3-270m/progress.jsonl
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


def samples(journal: Path, context_tokens: int) -> dict[str, dict]:
    """The journal's scored samples of ``context_tokens`` tokens by key, in sample order."""
    by_key = Journal.read(journal).records()
    prefix = f"{context_tokens}:"
    keys = sorted((k for k in by_key if k.startswith(prefix)), key=lambda k: int(k.split(":")[1]))
    if not keys:
        raise SystemExit(f"no {context_tokens}-token samples in {journal}")
    return {k: by_key[k] for k in keys}


def differences(pairs: list[tuple[dict, dict]]) -> dict[str, float]:
    """``scores`` of the first run of each pair minus those of the second."""
    first, second = scores([a for a, _ in pairs]), scores([b for _, b in pairs])
    return {name: first[name] - second[name] for name in first}


def interval(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("journal", type=Path, help="an eval run's progress.jsonl")
    parser.add_argument("--context-tokens", type=int, default=1024)
    parser.add_argument("--block", type=int, default=50, help="also score consecutive blocks of this many samples")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--against", type=Path, help="another run's journal: score this run minus that one")
    args = parser.parse_args()
    by_key = samples(args.journal, args.context_tokens)
    rng = random.Random(args.seed)
    if args.against:
        other = samples(args.against, args.context_tokens)
        pairs = [(record, other[key]) for key, record in by_key.items() if key in other]
        if not pairs:
            raise SystemExit(f"{args.journal} and {args.against} have no scored sample in common")
        draws = [differences([rng.choice(pairs) for _ in pairs]) for _ in range(args.resamples)]
        print(f"this run minus {args.against}: {len(pairs)} samples in common, {args.resamples} paired resamples")
        for name, value in differences(pairs).items():
            low, high = interval([d[name] for d in draws])
            print(f"  {name:13s} {value:+.3f}  [{low:+.3f}, {high:+.3f}]")
        return
    records = list(by_key.values())
    draws = [scores([rng.choice(records) for _ in records]) for _ in range(args.resamples)]
    print(f"{len(records)} samples, {args.resamples} resamples, 95% interval")
    for name, value in scores(records).items():
        low, high = interval([d[name] for d in draws])
        print(f"  {name:13s} {value:.3f}  [{low:.3f}, {high:.3f}]")
    for start in range(0, len(records), args.block):
        block = scores(records[start : start + args.block])
        shown = ", ".join(f"{name} {value:.3f}" for name, value in block.items())
        print(f"  samples {start}-{min(start + args.block, len(records)) - 1}: {shown}")


if __name__ == "__main__":
    main()
