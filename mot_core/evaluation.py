"""Held-out evaluation of a translator: the conditions and metrics of DESIGN.md, side by side.

For each sample and context length, the target scores the same continuation under five caches
for the context: ``native`` (its own prefill, the upper bound), ``none`` (only BOS and the
native tail), ``translated`` (the learned translator), ``deranged`` (the translator applied to
another sample's source cache: the control for "some plausible context"), and ``ridge`` (the
closed-form baseline). Every condition runs the same native tail and continuation, so the only
difference is the cache. Timings compare the target's native prefill with translation
(alignment + translator + assembling and loading the cache) on the same sample, in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from mot_core.alignment import align
from mot_core.cache_ops import prefill, replace_head, to_model_cache
from mot_core.loading import LoadedModel
from mot_core.translation.assemble import rows_to_cache
from mot_core.translation.features import align_rows, kv_rows
from mot_core.translation.objective import (
    continuation_logits,
    kl_per_token,
    nll_per_token,
    prepare,
    rows_model_cache,
    translated_rows,
)
from mot_core.translation.samples import Sample
from mot_core.translation.translator import CacheTranslator

CONDITIONS = ("native", "none", "translated", "deranged", "ridge")
QA_CONDITIONS = ("native", "none", "translated", "ridge")
GREEDY_TOKENS = 32


def retention(nll_none: float, nll_x: float, nll_native: float) -> float:
    gap = nll_none - nll_native
    return (nll_none - nll_x) / gap if gap > 0 else float("nan")


@torch.no_grad()
def _greedy(target: LoadedModel, model_cache, prefix_ids: torch.Tensor, n: int) -> list[int]:
    if model_cache is None and target.spec.prepend_bos:
        prefix_ids = torch.cat((torch.tensor([[target.spec.bos_token_id]]), prefix_ids), dim=-1)
    if model_cache is None:
        model_cache = DynamicCache(config=target.model.config)
    out, inputs = [], prefix_ids.to(target.device)
    for _ in range(n):
        result = target.model(input_ids=inputs, cache=model_cache, use_cache=True)
        token = int(result.logits[0, -1].argmax())
        out.append(token)
        inputs = torch.tensor([[token]], device=target.device)
    return out


def _caches(target, prepared, other, translators) -> dict[str, Callable[[], object]]:
    """Builders of each condition's model cache (built lazily: some are timed)."""
    builders = {"native": lambda: to_model_cache(target, prepared.native_cache), "none": lambda: None}
    for name, translator in translators.items():
        builders[name] = lambda t=translator: rows_model_cache(
            target, translated_rows(t, prepared, target), prepared.target_ids, prepared.keep
        )
    if "translated" in translators and other is not None:
        builders["deranged"] = lambda: rows_model_cache(
            target, translated_rows(translators["translated"], other, target), other.target_ids, other.keep
        )
    return builders


@torch.no_grad()
def time_translation(
    source: LoadedModel, target: LoadedModel, translator: CacheTranslator, sample: Sample, native_tail: int
) -> tuple[float, float]:
    """(native prefill seconds, translation seconds) for one context, measured back to back."""
    alignment = align(source.tokenizer, target.tokenizer, sample.context, causal=True)
    source_cache, _ = prefill(source, alignment.source_ids)
    target_ids = torch.tensor([alignment.target_ids])
    keep = max(1, target_ids.shape[-1] - native_tail)
    started = time.perf_counter()
    prefill(target, target_ids[:, :keep])
    native_s = time.perf_counter() - started
    started = time.perf_counter()
    again = align(source.tokenizer, target.tokenizer, sample.context, causal=True)
    aligned = align_rows(kv_rows(source_cache, source.spec), again.weights)
    rows = translator.predict_rows(aligned)
    cache = rows_to_cache(rows[:keep], target.spec, target_ids[:, :keep], target.fingerprint.id)
    to_model_cache(target, replace_head(target, cache))
    return native_s, time.perf_counter() - started


@dataclass
class EvalResult:
    rows: list[dict]
    per_length: dict[int, dict]


def evaluate(
    source: LoadedModel,
    target: LoadedModel,
    translators: dict[str, CacheTranslator],
    samples_by_length: dict[int, list[Sample]],
    *,
    native_tail: int,
    continuation_tokens: int = 64,
) -> EvalResult:
    """NLL, retention, KL, top-1 and greedy match per (context length, condition)."""
    rows, per_length = [], {}
    for length, samples in samples_by_length.items():
        prepared = [
            prepare(source, target, s, continuation_tokens, native_tail)
            for s in tqdm(samples, desc=f"prepare {length} tok", unit="ctx")
        ]
        sums = {c: {"nll": 0.0, "kl": 0.0, "top1": 0.0, "greedy": 0.0} for c in CONDITIONS}
        tokens, greedy_total, timings = 0, 0, []
        for i, p in enumerate(tqdm(prepared, desc=f"score {length} tok", unit="ctx")):
            other = prepared[(i + 1) % len(prepared)] if len(prepared) > 1 else None
            builders = _caches(target, p, other, translators)
            logits = {c: continuation_logits(target, b(), p.tail_ids, p.continuation_ids) for c, b in builders.items()}
            greedy = {c: _greedy(target, b(), p.tail_ids, GREEDY_TOKENS) for c, b in builders.items()}
            for c, lg in logits.items():
                sums[c]["nll"] += nll_per_token(lg, p.continuation_ids).sum().item()
                sums[c]["kl"] += kl_per_token(logits["native"], lg).sum().item()
                sums[c]["top1"] += (lg.argmax(-1) == logits["native"].argmax(-1)).sum().item()
                sums[c]["greedy"] += sum(a == b for a, b in zip(greedy[c], greedy["native"], strict=True))
            tokens += p.continuation_ids.shape[-1]
            greedy_total += GREEDY_TOKENS
            if "translated" in translators:
                timings.append(time_translation(source, target, translators["translated"], samples[i], native_tail))
        present = [c for c in CONDITIONS if c in builders]
        nll = {c: sums[c]["nll"] / tokens for c in present}
        length_rows = []
        for c in present:
            length_rows.append(
                {
                    "context_tokens": length,
                    "condition": c,
                    "nll": nll[c],
                    "retention": retention(nll["none"], nll[c], nll["native"]),
                    "kl": sums[c]["kl"] / tokens,
                    "top1": sums[c]["top1"] / tokens,
                    "greedy_match": sums[c]["greedy"] / greedy_total,
                    "samples": len(prepared),
                }
            )
        rows += length_rows
        ret = {r["condition"]: r["retention"] for r in length_rows}
        info = {"samples": len(prepared), "continuation_tokens": tokens}
        if "translated" in ret and "deranged" in ret:
            info["content_gain"] = ret["translated"] - ret["deranged"]
        if timings:
            info["native_prefill_s"] = statistics.median(t[0] for t in timings)
            info["translate_s"] = statistics.median(t[1] for t in timings)
            info["translate_over_prefill"] = info["translate_s"] / info["native_prefill_s"]
        per_length[length] = info
    return EvalResult(rows, per_length)


@torch.no_grad()
def qa_accuracy(
    source: LoadedModel,
    target: LoadedModel,
    translators: dict[str, CacheTranslator],
    items: list[dict],
    *,
    native_tail: int,
) -> dict[str, float]:
    """Two-choice accuracy per condition (scoring of data/eval/SOURCE.md)."""
    correct = {c: 0 for c in QA_CONDITIONS if c in ("native", "none") or c in translators}
    for item in tqdm(items, desc="qa", unit="item"):
        p = prepare(source, target, Sample(item["context"], " ", -1), 1, native_tail)
        prompt = f"\nQuestion: {item['question']}\nAnswer:"
        prompt_ids = target.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        builders = _caches(target, p, None, translators)
        for c in correct:
            scores = []
            for choice in item["choices"]:
                choice_ids = target.tokenizer(" " + choice, add_special_tokens=False, return_tensors="pt")["input_ids"]
                cont = torch.cat((prompt_ids, choice_ids), dim=-1)
                logits = continuation_logits(target, builders[c](), p.tail_ids, cont)
                logprobs = -nll_per_token(logits, cont)[-choice_ids.shape[-1] :]
                scores.append(logprobs.mean().item())
            predicted = item["choices"][max(range(len(scores)), key=scores.__getitem__)]
            correct[c] += predicted == item["answer"]
    return {c: n / len(items) for c, n in correct.items()}


def write_report(out: Path, result: EvalResult, qa: dict[str, float] | None, meta: dict) -> None:
    """report.json, report.md and report.png under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = list(result.rows)
    report = {"meta": meta, "rows": rows, "per_context_length": {str(k): v for k, v in result.per_length.items()}}
    for length, info in result.per_length.items():
        for row in rows:
            if row["context_tokens"] == length:
                row.update({k: info[k] for k in ("content_gain", "native_prefill_s", "translate_s") if k in info})
    if qa is not None:
        for condition, accuracy in qa.items():
            rows.append({"condition": condition, "qa_accuracy": accuracy})
        gap = qa["native"] - qa["none"]
        report["qa_retention"] = (qa["translated"] - qa["none"]) / gap if "translated" in qa and gap > 0 else None
    (out / "report.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# Translator evaluation: {meta.get('source')} -> {meta.get('target')}",
        "",
        "| context tokens | condition | NLL | retention | KL | top-1 | greedy match |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        lines.append(
            f"| {r['context_tokens']} | {r['condition']} | {r['nll']:.3f} | {r['retention']:.3f} | "
            f"{r['kl']:.3f} | {r['top1']:.3f} | {r['greedy_match']:.3f} |"
        )
    lines += [
        "",
        "| context tokens | samples | content gain | native prefill s | translate s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for length, info in result.per_length.items():
        lines.append(
            f"| {length} | {info['samples']} | {info.get('content_gain', float('nan')):.3f} | "
            f"{info.get('native_prefill_s', float('nan')):.3f} | {info.get('translate_s', float('nan')):.3f} | "
            f"{info.get('translate_over_prefill', float('nan')):.3f} |"
        )
    if qa is not None:
        lines += ["", "| QA condition | accuracy |", "|---|---|"] + [f"| {c} | {a:.3f} |" for c, a in qa.items()]
        lines += ["", f"QA retention: {report['qa_retention']}"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plot(out / "report.png", result, meta)


def _plot(path: Path, result: EvalResult, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    lengths = sorted(result.per_length)
    for condition in ("translated", "deranged", "ridge"):
        points = [(r["context_tokens"], r["retention"]) for r in result.rows if r["condition"] == condition]
        if points:
            ax1.plot(*zip(*sorted(points), strict=True), marker="o", label=condition)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set(xlabel="context tokens", ylabel="retention", title="NLL retention (1 = native prefill)")
    ax1.legend()
    ratios = [result.per_length[n].get("translate_over_prefill") for n in lengths]
    if any(r is not None for r in ratios):
        ax2.bar([str(n) for n in lengths], [r or 0 for r in ratios])
    ax2.axhline(0.25, color="red", lw=0.8, ls="--", label="bar: 0.25x")
    ax2.set(xlabel="context tokens", ylabel="translation time / native prefill", title="cost")
    ax2.legend()
    fig.suptitle(f"{meta.get('source')} -> {meta.get('target')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
