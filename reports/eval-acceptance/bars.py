"""Every acceptance bar at a glance: the current runs of the shipped translators (and the attended
share, not shipped) against the translator issue's bars, one PNG.

Why: the bars table in the README is seven rows of five numbers; which bar each pair misses on
which text, and by how much against the sampling noise, is quicker seen. Each point is a run's
report (``report.json``); its whisker the 95% bootstrap interval over the run's samples
(``sample_bootstrap.py``, from its journal; QA retention and cost have no whisker: QA scores
1,000 items once, and the cost is a median of timings). Reads committed runs; scores nothing.

    python reports/eval-acceptance/bars.py          # writes reports/eval-acceptance/bars.png
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from sample_bootstrap import interval, samples, scores  # noqa: E402 (this folder's script)

HERE = Path(__file__).resolve().parent
CONTEXT_TOKENS = 1024
# (label, run directory): the runs the README's bars table quotes
RUNS = [
    ("Qwen2.5 · speeches + QA", "news-phrases/smollm2-135m__qwen2.5-0.5b"),
    ("Qwen2.5 · Wikipedia-style", "wiki-shipped/smollm2-135m__qwen2.5-0.5b"),
    ("Qwen2.5 · Moby-Dick", "moby-dick-shipped/smollm2-135m__qwen2.5-0.5b"),
    ("Qwen2.5 at Q6\n(not shipped) · Moby-Dick", "moby-dick-q6/smollm2-135m__qwen2.5-0.5b"),
    ("Gemma-3 · speeches + QA", "gemma3-top1/smollm2-135m__gemma3-270m"),
    ("Gemma-3 · Wikipedia-style", "wiki-top1/smollm2-135m__gemma3-270m"),
    ("Gemma-3 · Moby-Dick", "moby-dick-top1/smollm2-135m__gemma3-270m"),
    ("Gemma-3 + attended 3%\n(not shipped) · Moby-Dick", "moby-dick-attended/smollm2-135m__gemma3-270m"),
]
# (panel title, bar, higher is better)
PANELS = [
    ("retention", 0.8, True),
    ("content gain", 0.55, True),
    ("retention − ridge", 0.1, True),
    ("QA retention", 0.5, True),
    ("translation / native prefill", 0.25, False),
]
PANELS_FROM_JOURNAL = ("retention", "content gain", "retention − ridge")  # with bootstrap whiskers


def _with_margin(scored: dict[str, float]) -> dict[str, float]:
    return scored | {"retention − ridge": scored["retention"] - scored["ridge"]}


def run_values(directory: Path, rng: random.Random, resamples: int = 2000) -> tuple[dict, str]:
    """Per panel, the run's value and, where its journal gives one, the bootstrap interval; and the
    translator's matmul dtype the cost was measured with ("?" where the run did not record it)."""
    report = json.loads((directory / "report.json").read_text())
    records = list(samples(directory / "progress.jsonl", CONTEXT_TOKENS).values())
    point = _with_margin(scores(records))
    draws = [_with_margin(scores([rng.choice(records) for _ in records])) for _ in range(resamples)]
    values = {name: (point[name], interval([d[name] for d in draws])) for name in PANELS_FROM_JOURNAL}
    if "qa_retention" in report:
        values["QA retention"] = (report["qa_retention"], None)
    cost = report["per_context_length"][str(CONTEXT_TOKENS)]["translate_over_prefill"]
    values["translation / native prefill"] = (cost, None)
    machine = report["meta"].get("machine", {})  # runs before stop 49 did not record it
    return values, {"bfloat16": "bf16", "float32": "fp32"}.get(machine.get("translator_dtype"), "?")


def main() -> None:
    rng = random.Random(0)
    runs = [(label, *run_values(HERE / path, rng)) for label, path in RUNS]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.1 * len(PANELS) + 2.5, 0.55 * len(runs) + 1.6), sharey=True)
    ys = list(range(len(runs)))[::-1]
    for ax, (name, bar, higher) in zip(axes, PANELS, strict=True):
        for y, (_, values, dtype) in zip(ys, runs, strict=True):
            if name not in values:
                continue
            value, whisker = values[name]
            met = value >= bar if higher else value <= bar
            colour = "tab:green" if met else "tab:red"
            if whisker is not None:
                ax.plot(whisker, [y, y], color=colour, lw=2, alpha=0.5)
            ax.plot([value], [y], "o", color=colour)
            label = f"{value:.3f}" + (f" {dtype}" if name.startswith("translation") else "")
            ax.annotate(label, (value, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
        ax.axvline(bar, color="black", ls="--", lw=1)
        ax.set_title(f"{name}\nbar {'≥' if higher else '≤'} {bar:g}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.2)
    axes[0].set_yticks(ys, [label for label, *_ in runs], fontsize=8)
    fig.suptitle(
        f"Acceptance bars at {CONTEXT_TOKENS} tokens, 200 samples per run (green: met; whiskers: 95% bootstrap; "
        "cost on a CPU whose translator matmuls ran in bf16 or fp32, ?: not recorded)",
        fontsize=10,
    )
    fig.tight_layout()
    out = HERE / "bars.png"
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")
    for label, values, _ in runs:
        shown = ", ".join(f"{k} {v[0]:.3f}" for k, v in values.items())
        print(f"  {label.replace(chr(10), ' ')}: {shown}")


if __name__ == "__main__":
    main()
