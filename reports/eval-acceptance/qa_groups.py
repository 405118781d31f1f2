"""QA accuracy and retention of an acceptance run by item group, with a bootstrap interval.

The report gives QA retention over every item; which items were used to choose the operating
point (qa_dev items 100-499) is this project's history, not the report's, so the split is read
from the run's journal here, through the report's own pieces (``Journal``, ``qa_keys``: a record
counts only if it was scored from this item; ``accuracy_of``, ``qa_retention``). Nothing is scored.

    python reports/eval-acceptance/qa_groups.py reports/eval-acceptance/smollm2-135m__qwen2.5-0.5b/progress.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from mot_core.evaluation import accuracy_of, qa_keys, qa_retention
from mot_core.journal import Journal

TUNING = range(100, 500)  # qa_dev items the operating points were chosen on (experiments/selection/)
GROUPS = {
    "all": lambda i: True,
    "0-99 and 500-999 (no choice made on them)": lambda i: i not in TUNING,
    "0-99": lambda i: i < TUNING.start,
    "100-499 (tuning items)": lambda i: i in TUNING,
    "500-999": lambda i: i >= TUNING.stop,
}


def read_qa_records(journal: Path, qa: Path) -> dict[int, dict[str, bool]]:
    """Item index -> whether each condition answered it right, for the items of ``qa`` scored."""
    items = [json.loads(line) for line in qa.read_text(encoding="utf-8").splitlines() if line.strip()]
    scored = Journal.read(journal)
    records = {i: scored.get(*key) for i, key in enumerate(qa_keys(items))}
    return {i: record for i, record in records.items() if record is not None}


def _fixed(value: float | None) -> str:
    """QA retention is undefined (None) for a group where native answers no better than none."""
    return "n/a" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("journal", type=Path, help="a mot eval run's progress.jsonl")
    parser.add_argument("--qa", type=Path, default=Path("data/eval/qa_dev.jsonl"), help="the run's --qa file")
    parser.add_argument(
        "--draws", type=int, default=2000, help="bootstrap resamples of the items, paired across conditions"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    records = read_qa_records(args.journal, args.qa)
    print(f"{len(records)} QA items scored")
    print("| items | n | native | none | translated (QA retention) | ridge (QA retention) |")
    print("|---|---|---|---|---|---|")
    for name, keep in GROUPS.items():
        group = [r for i, r in sorted(records.items()) if keep(i)]
        if not group:
            continue
        acc = accuracy_of(group)
        ret = qa_retention(acc)
        cells = " | ".join(f"{acc[c]:.3f} ({_fixed(ret[c])})" for c in ("translated", "ridge"))
        print(f"| {name} | {len(group)} | {acc['native']:.3f} | {acc['none']:.3f} | {cells} |")
    rng = random.Random(args.seed)
    items = list(records.values())
    draws = [qa_retention(accuracy_of(rng.choices(items, k=len(items))))["translated"] for _ in range(args.draws)]
    draws = sorted(d for d in draws if d is not None)  # undefined where a draw has native no better than none
    if not draws:
        print("translated QA retention, all items: undefined in every bootstrap draw")
        return
    low, high = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    under = sum(d < 0.5 for d in draws) / len(draws)
    print(f"translated QA retention, all items: 95% bootstrap interval {low:.3f}-{high:.3f};", end=" ")
    print(f"{under:.0%} of draws under 0.5")


if __name__ == "__main__":
    main()
