"""Held-out evaluation of a translator: the conditions and metrics of DESIGN.md, side by side.

For each sample and context length, the target scores the same continuation under six caches
for the context: ``native`` (its own prefill, the upper bound), ``none`` (only BOS and the
native tail), ``translated`` (the learned translator), ``deranged`` (the translator applied to
another sample's source cache: the control for "some plausible context"), ``ridge`` (the
closed-form baseline), and ``native-deranged`` (the target's own prefill of that other sample:
``native_content_gain`` is the content gain of native prefill on the same text, the reference
for the translator's). Every condition runs the same native tail and continuation, so the only
difference is the cache. Timings compare the target's native prefill with translation
(alignment + translator + assembling and loading the cache) on the same sample, in the same run.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from mot_core.benchmarks import cpu_name, timed_runs
from mot_core.cache_ops import prefill, to_model_cache
from mot_core.journal import Journal, digest
from mot_core.kv_cache import KVCache
from mot_core.loading import LoadedModel
from mot_core.translation.objective import (
    PreparedSample,
    continuation_logits,
    kl_per_token,
    nll_per_token,
    prepare,
    translated_cache,
)
from mot_core.translation.recompute import DEFAULT_SELECTION, SELECTIONS, OperatingPoint, with_native_rows
from mot_core.translation.samples import Sample
from mot_core.translation.translator import CacheTranslator

CONDITIONS = ("native", "none", "translated", "deranged", "ridge", "native-deranged")
QA_CONDITIONS = ("native", "none", "translated", "ridge")
GREEDY_TOKENS = 32
TIMING_REPEATS = 2  # per sample, each side: the fastest is kept (time_translation)
EVAL_FORMAT = 1  # what a journal record holds and how it is scored; a change makes old journals unusable


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
        result = target.model(input_ids=inputs, cache=model_cache, use_cache=True, logits_to_keep=1)
        token = int(result.logits[0, -1].argmax())
        out.append(token)
        inputs = torch.tensor([[token]], device=target.device)
    return out


@dataclass(frozen=True)
class Variant:
    """How a translated condition is built: which translator, and what the target recomputes itself."""

    translator: str = "translated"
    point: OperatingPoint | None = None  # None: pure translation (recompute.blend otherwise)
    ablation: bool = False  # costs what its fraction costs (not timed on its own)


@dataclass(frozen=True)
class Knob:
    """The quality knob an evaluation measures: the operating point's recompute ``fraction`` (None:
    pure translation) and the shares every fraction it scores takes (the sweep's and the
    ablations' too): the context's last ``recent``, the ``attended`` share its last tokens read
    most, the rest by ``selection`` (``recompute.OperatingPoint``)."""

    fraction: float | None = None
    selection: str = DEFAULT_SELECTION
    recent: float = 0.0
    attended: float = 0.0

    def at(self, fraction: float | None) -> OperatingPoint | None:
        """The point at ``fraction`` (None: pure translation), its shares cut to what fits (recent first)."""
        if fraction is None:
            return None
        share = min(self.recent, fraction)
        return OperatingPoint(fraction, self.selection, share, min(self.attended, fraction - share))

    @property
    def point(self) -> OperatingPoint | None:
        return self.at(self.fraction)


def sweep_variants(knob: Knob, fractions: Sequence[float], *, ablations: bool = True) -> dict[str, Variant]:
    """Extra conditions: the recompute fractions of the sweep, and ablations at the operating point
    (or at the middle of the sweep when the operating point is pure translation): the rest of the
    budget chosen by each simpler selection than the knob's (those after it in
    ``recompute.SELECTIONS``: whole words instead of phrases, single surprising tokens, the layer-0
    error, at random); where a ``recent`` share is set, all of the budget on the selection
    (``<selection>-only``) or on the context's last tokens (``recent-only``); and where an
    ``attended`` share is set, the same budget without it (``no-attended``)."""
    variants = {f"recompute@{f:g}": Variant(point=knob.at(f)) for f in fractions}
    ablated = knob.fraction or (sorted(fractions)[len(fractions) // 2] if fractions else None)
    if ablated and ablations:
        point = knob.at(ablated)

        def ablation(changed: OperatingPoint) -> Variant:
            return Variant(point=changed, ablation=True)

        for simpler in SELECTIONS[SELECTIONS.index(point.selection) + 1 :]:
            variants[f"{simpler}@{ablated:g}"] = ablation(replace(point, selection=simpler))
        if point.recent > 0:
            variants[f"{point.selection}-only@{ablated:g}"] = ablation(OperatingPoint(ablated, point.selection))
            variants[f"recent-only@{ablated:g}"] = ablation(OperatingPoint(ablated, recent=ablated))
        if point.attended > 0:
            variants[f"no-attended@{ablated:g}"] = ablation(replace(point, attended=0.0))
    return variants


def _condition_caches(target, prepared, other, translators, point: Variant, sweep) -> dict[str, Callable]:
    """Builders of each condition's ``KVCache`` (None: no cache), evaluated lazily; ``point`` builds
    ``translated`` and ``deranged``."""

    def build(p, variant):
        return translated_cache(translators[variant.translator], p, target, variant.point)

    builders = {"native": lambda: prepared.native_cache, "none": lambda: None}
    if other is not None:
        builders["native-deranged"] = lambda: other.native_cache
    if "translated" in translators:
        builders["translated"] = lambda: build(prepared, point)
        if other is not None:
            builders["deranged"] = lambda: build(other, point)
    if "ridge" in translators:
        builders["ridge"] = lambda: build(prepared, Variant("ridge"))
    for name, variant in sweep.items():
        builders[name] = lambda v=variant: build(prepared, v)
    return builders


def control_index(samples: Sequence[Sample], i: int) -> int | None:
    """Which sample's context is sample ``i``'s deranged control: the next one cut from another
    document, wrapping around. A corpus of one document (a .txt file) has no other: there it is the
    next passage of the same text. None for a single sample."""
    count = len(samples)
    if count < 2:
        return None
    following = [(i + k) % count for k in range(1, count)]
    return next((j for j in following if samples[j].document != samples[i].document), following[0])


def _with_neighbours(
    prepare_one: Callable[[Sample], PreparedSample], samples: Sequence[Sample], todo: Sequence[int] | None = None
):
    """``(index, prepared sample, its deranged control prepared)`` for each index of ``todo``
    (default: all); the control is ``control_index``'s. Samples are prepared as the loop reaches
    them, and kept only while a later index still needs them: a 1024-token sample holds ~150 MB of
    caches and rows, so preparing 200 up front would need 30 GB."""
    todo = list(range(len(samples))) if todo is None else list(todo)
    controls = {i: control_index(samples, i) for i in todo}
    prepared: dict[int, PreparedSample] = {}

    def get(i: int) -> PreparedSample:
        if i not in prepared:
            prepared[i] = prepare_one(samples[i])
        return prepared[i]

    for n, i in enumerate(todo):
        control = controls[i]
        yield i, get(i), None if control is None else get(control)
        later = todo[n + 1 :]
        needed = set(later[:1]) | {controls[j] for j in later}
        for j in [j for j in prepared if j not in needed]:
            del prepared[j]


def _sample_inputs(samples: Sequence[Sample], i: int) -> str:
    """What sample ``i``'s scores are computed from: its text and its deranged control's context."""
    control = control_index(samples, i)
    return digest(samples[i].context, samples[i].continuation, "" if control is None else samples[control].context)


@torch.no_grad()
def _score_sample(target: LoadedModel, prepared: PreparedSample, builders: dict[str, Callable]) -> dict:
    """Per condition, the sums over the continuation that ``_summarise`` turns into metrics."""
    caches = {c: b() for c, b in builders.items()}
    tail, continuation = prepared.tail_ids, prepared.continuation_ids
    logits = {c: continuation_logits(target, _model_cache(target, kv), tail, continuation) for c, kv in caches.items()}
    greedy = {c: _greedy(target, _model_cache(target, kv), tail, GREEDY_TOKENS) for c, kv in caches.items()}
    sums = {
        c: {
            "nll": nll_per_token(lg, continuation).sum().item(),
            "kl": kl_per_token(logits["native"], lg).sum().item(),
            "top1": (lg.argmax(-1) == logits["native"].argmax(-1)).sum().item(),
            "greedy": sum(a == b for a, b in zip(greedy[c], greedy["native"], strict=True)),
        }
        for c, lg in logits.items()
    }
    return {"tokens": continuation.shape[-1], "greedy_tokens": GREEDY_TOKENS, "conditions": sums}


def _model_cache(target: LoadedModel, cache):
    return None if cache is None else to_model_cache(target, cache)


@torch.no_grad()
def time_translation(
    source: LoadedModel,
    target: LoadedModel,
    translator: CacheTranslator,
    prepared: PreparedSample,
    context: str,
    variants: dict[str, Variant],
    repeats: int = TIMING_REPEATS,
) -> tuple[float, dict[str, float]]:
    """Native prefill seconds and, per label, translation seconds (recompute included), back to back.

    Translation is everything the target would otherwise prefill for: ``CacheTranslator.translate``
    (alignment, the target's layer 0 where the translator reads it, the translator, assembling the
    cache), its native head, the recompute, and loading
    it into the model. The source's prefill is not: it runs once per context, for every target.
    Each side is run ``repeats`` times in a row and the fastest kept, the same for both: the first
    call after other work pays for pages the allocator has to fault in again (the first label
    timed used to read up to 2x slower than the same call repeated).
    """
    target_ids = prepared.alignment.target_ids
    keep = max(1, len(target_ids) - translator.card.native_tail)
    native_ids = torch.tensor([target_ids[:keep]])
    native_s = min(timed_runs(lambda: prefill(target, native_ids), repeats))
    translations = {
        label: min(timed_runs(translation_call(source, target, translator, prepared, context, v), repeats))
        for label, v in variants.items()
    }
    return native_s, translations


def translation_call(
    source: LoadedModel,
    target: LoadedModel,
    translator: CacheTranslator,
    prepared: PreparedSample,
    context: str,
    variant: Variant,
) -> Callable[[], None]:
    """One translation as ``time_translation`` times it: ``CacheTranslator.translate``, the native
    head and the ``variant``'s recompute, and loading into the model."""

    def translate() -> None:
        result = translator.translate(
            prepared.source_cache,
            context,
            source_spec=source.spec,
            source_tokenizer=source.tokenizer,
            target_spec=target.spec,
            target_tokenizer=target.tokenizer,
            target_first_layer=target,
            all_positions=variant.point is not None,
        )
        to_model_cache(target, with_native_rows(target, result.cache, variant.point))

    return translate


def _variants(
    translators: dict, knob: Knob, sweep: Sequence[float], ablations: bool
) -> tuple[Variant, dict[str, Variant]]:
    """The ``translated`` condition (pure translation, or the operating point's recompute) and the
    extra conditions (``sweep_variants``; none without a translator)."""
    point = Variant(point=knob.point)
    if "translated" not in translators:
        return point, {}
    return point, sweep_variants(knob, sweep, ablations=ablations)


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
    knob: Knob = Knob(),
    sweep: Sequence[float] = (),
    ablations: bool = True,
    journal: Journal | None = None,
    score: bool = True,
) -> EvalResult:
    """NLL, retention, KL, top-1 and greedy match per (context length, condition).

    ``translated`` and ``deranged`` use the ``knob``'s operating point (``Knob.point``; pure
    translation without a fraction); each fraction of ``sweep`` adds a ``recompute@f`` condition
    and its timing (the knob's shares at that fraction), and ``ablations`` the simpler selections
    at the operating point. Samples already in the ``journal`` are not scored
    again; each newly scored one is added to it as soon as it is done. Without ``score``, nothing
    new is scored: the rows are those of the samples the journal holds (an interim report of a run
    still going on).
    """
    point, variants = _variants(translators, knob, sweep, ablations)
    timed = {"translated": point} | {name: v for name, v in variants.items() if not v.ablation}
    journal = journal if journal is not None else Journal()
    rows, per_length = [], {}
    machine = timing_machine(target)
    prepare_one = lambda s: prepare(source, target, s, continuation_tokens, native_tail)  # noqa: E731
    for length, samples in samples_by_length.items():
        keys = [(f"{length}:{i}", _sample_inputs(samples, i)) for i in range(len(samples))]
        todo = [i for i, key in enumerate(keys) if journal.get(*key) is None] if score else []
        with tqdm(total=len(samples), initial=len(samples) - len(todo), desc=f"{length} tok", unit="ctx") as bar:
            for i, p, other in _with_neighbours(prepare_one, samples, todo):
                record = _score_sample(target, p, _condition_caches(target, p, other, translators, point, variants))
                if "translated" in translators:
                    native_s, translate_s = time_translation(
                        source, target, translators["translated"], p, samples[i].context, timed
                    )
                    record["timing"] = {"native_s": native_s, "translate_s": translate_s, "machine": machine}
                journal.add(*keys[i], record)
                bar.update()
        records = [r for r in (journal.get(*key) for key in keys) if r is not None]
        if not records:
            continue
        length_rows, per_length[length] = _summarise(length, records, variants, timed)
        per_length[length] |= {
            "recompute": knob.fraction,
            "recent": knob.recent,
            "attended": knob.attended,
            "selection": knob.selection,
        }
        rows += length_rows
    return EvalResult(rows, per_length)


def timing_machine(target: LoadedModel) -> str:
    """What a sample's timings were measured on (the GPU's name, else the CPU's), kept with them: a
    run resumed from its journal on another machine mixes two machines' ratios (``cost_by_machine``)."""
    if target.device.type == "cuda":
        return torch.cuda.get_device_name(target.device)
    return cpu_name()


def cost_by_machine(timings: list[dict]) -> dict[str, dict]:
    """Per machine the timings came from (records before it was recorded: ``"not recorded"``), its
    samples and the cost as the report computes it over all of them (median translation over median
    prefill). Empty where one machine timed every sample."""
    groups: dict[str, list[dict]] = {}
    for t in timings:
        groups.setdefault(t.get("machine", "not recorded"), []).append(t)
    if len(groups) < 2:
        return {}
    out = {}
    for machine, group in groups.items():
        native, translate = _median_timings(group, ["translated"])
        out[machine] = {"samples": len(group), "translate_over_prefill": translate["translated"] / native}
    return out


def _median_timings(timings: list[dict], labels) -> tuple[float, dict[str, float]]:
    """The median native prefill and, per label, the median translation over ``timings`` (non-empty):
    what a report's cost is the ratio of."""
    native = statistics.median(t["native_s"] for t in timings)
    return native, {label: statistics.median(t["translate_s"][label] for t in timings) for label in labels}


def _summarise(length: int, records: list[dict], variants: dict[str, Variant], timed) -> tuple[list[dict], dict]:
    """Rows (one per condition) and the per-length summary, from the samples' records."""
    tokens = sum(r["tokens"] for r in records)
    greedy_total = sum(r["greedy_tokens"] for r in records)
    sums: dict[str, dict[str, float]] = {}
    for record in records:
        for c, values in record["conditions"].items():
            acc = sums.setdefault(c, dict.fromkeys(values, 0.0))
            for name, value in values.items():
                acc[name] += value
    # a condition some records lack (a journal begun before it existed) would be averaged over too few
    sums = {c: v for c, v in sums.items() if all(c in r["conditions"] for r in records)}
    present = [c for c in CONDITIONS if c in sums] + [c for c in sums if c not in CONDITIONS]
    nll = {c: sums[c]["nll"] / tokens for c in present}
    timings = [r["timing"] for r in records if "timing" in r]
    native_s, translate_s = _median_timings(timings, timed) if timings else (None, {})
    rows = []
    for c in present:
        row = {
            "context_tokens": length,
            "condition": c,
            "nll": nll[c],
            "retention": retention(nll["none"], nll[c], nll["native"]),
            "kl": sums[c]["kl"] / tokens,
            "top1": sums[c]["top1"] / tokens,
            "greedy_match": sums[c]["greedy"] / greedy_total,
            "samples": len(records),
        }
        point = variants[c].point if c in variants else None
        if point is not None:
            row |= {"recompute": point.fraction, "selection": point.selection, "recent": point.recent}
        label = c
        if point is not None and variants[c].ablation and point.selection != "error":
            fraction = point.fraction  # the same number of tokens costs what the fraction costs
            label = f"recompute@{fraction:g}" if f"recompute@{fraction:g}" in translate_s else "translated"
        # (the "error" ablation is not timed: it also runs the target's layer 0 over every token)
        if label in translate_s and native_s:
            row["cost_ratio"] = translate_s[label] / native_s
        rows.append(row)
    ret = {r["condition"]: r["retention"] for r in rows}
    info = {"samples": len(records), "continuation_tokens": tokens}
    if "translated" in ret and "deranged" in ret:
        info["content_gain"] = ret["translated"] - ret["deranged"]
    if "native-deranged" in ret:
        info["native_content_gain"] = 1.0 - ret["native-deranged"]
    if timings:
        info["native_prefill_s"] = native_s
        info["translate_s"] = translate_s["translated"]
        info["translate_over_prefill"] = info["translate_s"] / native_s
        if by_machine := cost_by_machine(timings):
            info["cost_by_machine"] = by_machine
    return rows, info


def read_qa_items(path: Path) -> list[dict]:
    """Items of a QA file (JSONL: ``context``, ``question``, ``choices``, ``answer``)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@torch.no_grad()
def qa_accuracy(
    source: LoadedModel,
    target: LoadedModel,
    translators: dict[str, CacheTranslator],
    items: list[dict],
    *,
    native_tail: int,
    knob: Knob = Knob(),
    sweep: Sequence[float] = (),
    ablations: bool = True,
    journal: Journal | None = None,
    score: bool = True,
) -> dict[str, float]:
    """Two-choice accuracy per condition (scoring of data/eval/SOURCE.md); items already in the
    ``journal`` are not scored again. Without ``score``: over the items the journal holds
    (``qa_scored`` counts them); empty if it holds none."""
    point, variants = _variants(translators, knob, sweep, ablations)
    wanted = [c for c in QA_CONDITIONS if c in ("native", "none") or c in translators] + list(variants)
    journal = journal if journal is not None else Journal()
    keys = qa_keys(items)
    todo = [i for i, key in enumerate(keys) if journal.get(*key) is None] if score else []
    for i in tqdm(todo, total=len(items), initial=len(items) - len(todo), desc="qa", unit="item"):
        p = prepare(source, target, Sample(items[i]["context"], " ", -1), 1, native_tail)
        builders = _condition_caches(target, p, None, translators, point, variants)
        journal.add(*keys[i], {c: answers_right(target, p, items[i], builders[c]()) for c in wanted})
    return accuracy_of([r for r in (journal.get(*key) for key in keys) if r is not None])


def accuracy_of(records: list[dict[str, bool]]) -> dict[str, float]:
    """Per condition, the share of QA records it answered right; empty without records."""
    return {c: sum(r[c] for r in records) / len(records) for c in records[0]} if records else {}


def qa_keys(items: list[dict]) -> list[tuple[str, str]]:
    """Each QA item's journal key and digest: its place in the file and its content."""
    return [(f"qa:{i}", digest(json.dumps(item, sort_keys=True))) for i, item in enumerate(items)]


def qa_scored(items: list[dict], journal: Journal) -> int:
    """How many of ``items`` the journal holds."""
    return sum(journal.get(*key) is not None for key in qa_keys(items))


@torch.no_grad()
def answers_right(target: LoadedModel, prepared: PreparedSample, item: dict, cache: KVCache | None) -> bool:
    """Whether the target, given ``cache`` of the item's context (None: no context), scores the
    right choice highest (mean log-probability of its tokens after the question)."""
    prompt = f"\nQuestion: {item['question']}\nAnswer:"
    prompt_ids = target.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    scores = []
    for choice in item["choices"]:
        choice_ids = target.tokenizer(" " + choice, add_special_tokens=False, return_tensors="pt")["input_ids"]
        cont = torch.cat((prompt_ids, choice_ids), dim=-1)
        logits = continuation_logits(target, _model_cache(target, cache), prepared.tail_ids, cont)
        scores.append((-nll_per_token(logits, cont)[-choice_ids.shape[-1] :]).mean().item())
    return item["choices"][max(range(len(scores)), key=scores.__getitem__)] == item["answer"]


def qa_retention(accuracy: dict[str, float]) -> dict[str, float | None]:
    """Per condition other than native/none, (acc - none) / (native - none); None without a gap."""
    gap = accuracy["native"] - accuracy["none"]
    return {
        c: (a - accuracy["none"]) / gap if gap > 0 else None for c, a in accuracy.items() if c not in ("native", "none")
    }


def write_report(out: Path, result: EvalResult, qa: dict[str, float] | None, meta: dict) -> None:
    """report.json, report.md and report.png under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = list(result.rows)
    report = {"meta": meta, "rows": rows, "per_context_length": {str(k): v for k, v in result.per_length.items()}}
    for length, info in result.per_length.items():
        for row in rows:
            if row["context_tokens"] == length:
                keys = ("content_gain", "native_content_gain", "native_prefill_s", "translate_s")
                row.update({k: info[k] for k in keys if k in info})
    if qa is not None:
        for condition, accuracy in qa.items():
            rows.append({"condition": condition, "qa_accuracy": accuracy})
        by_condition = qa_retention(qa)
        report["qa_retention"] = by_condition.get("translated")
        report["qa_retention_by_condition"] = by_condition
    (out / "report.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# Translator evaluation: {meta.get('source')} -> {meta.get('target')}",
        "",
        f"Operating point: recompute fraction {meta.get('recompute')} (None: pure translation), "
        f"of which the context's last {meta.get('recent', 0.0)} (`recent`) and the share its last tokens read "
        f"most in the source prefill {meta.get('attended', 0.0)} (`attended`). "
        "cost = translation incl. recompute / native prefill, same samples, same run "
        f"(per sample, each the fastest of {TIMING_REPEATS} back-to-back runs; median over samples).",
        "",
    ]
    if "machine" in meta:
        machine = meta["machine"]
        lines += [
            f"Written on: {machine['cpu']}, {machine['torch_threads']} torch threads, translator matmuls in "
            f"{machine['translator_dtype']} (bfloat16 where the CPU has bfloat16 matmuls; without them the cost "
            'column is higher: README, "The cost column depends on the CPU"). The timings are those of the runs '
            "that scored the samples (`progress.jsonl`).",
            "",
        ]
    if meta.get("report_only"):
        scored = ", ".join(f"{info['samples']} at {n} tokens" for n, info in result.per_length.items())
        qa_part = f", {meta.get('qa_items_scored')} of {meta.get('qa_items')} QA items" if meta.get("qa_items") else ""
        lines += [f"**Interim report** (`--report-only`): of {meta.get('samples')} samples, {scored}{qa_part}.", ""]
    lines += [
        "| context tokens | condition | NLL | retention | KL | top-1 | greedy match | cost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        cost = f"{r['cost_ratio']:.3f}" if "cost_ratio" in r else ""
        lines.append(
            f"| {r['context_tokens']} | {r['condition']} | {r['nll']:.3f} | {r['retention']:.3f} | "
            f"{r['kl']:.3f} | {r['top1']:.3f} | {r['greedy_match']:.3f} | {cost} |"
        )
    lines += [
        "",
        "| context tokens | samples | content gain | native's content gain | native prefill s | translate s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for length, info in result.per_length.items():
        lines.append(
            f"| {length} | {info['samples']} | {info.get('content_gain', float('nan')):.3f} | "
            f"{info.get('native_content_gain', float('nan')):.3f} | "
            f"{info.get('native_prefill_s', float('nan')):.3f} | {info.get('translate_s', float('nan')):.3f} | "
            f"{info.get('translate_over_prefill', float('nan')):.3f} |"
        )
    for length, info in result.per_length.items():
        if "cost_by_machine" in info:
            parts = "; ".join(
                f"{machine}: {m['translate_over_prefill']:.3f} ({m['samples']} samples)"
                for machine, m in info["cost_by_machine"].items()
            )
            lines += [
                "",
                f"At {length} tokens the timings come from more than one machine (a resumed run); "
                f"ratio by machine: {parts}.",
            ]
    if qa is not None:
        lines += ["", "| QA condition | accuracy | QA retention |", "|---|---|---|"]
        for c, a in qa.items():
            qa_ret = report["qa_retention_by_condition"].get(c)
            lines.append(f"| {c} | {a:.3f} | {'' if qa_ret is None else f'{qa_ret:.3f}'} |")
        lines += ["", f"QA retention (translated): {report['qa_retention']}"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plot(out / "report.png", result, meta, report.get("qa_retention_by_condition"))


def _plot(path: Path, result: EvalResult, meta: dict, qa_retention: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    lengths = sorted(result.per_length)
    for condition in ("translated", "deranged", "ridge", "native-deranged"):
        points = [(r["context_tokens"], r["retention"]) for r in result.rows if r["condition"] == condition]
        if points:
            ax1.plot(*zip(*sorted(points), strict=True), marker="o", label=condition)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set(xlabel="context tokens", ylabel="retention", title="NLL retention (1 = native prefill)")
    ax1.legend()
    ratios = [result.per_length[n].get("translate_over_prefill") for n in lengths]
    if any(r is not None for r in ratios):
        ax2.bar(range(len(lengths)), [r or 0 for r in ratios])  # positions, not strings: no categorical axis
        ax2.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax2.axhline(0.25, color="red", lw=0.8, ls="--", label="bar: 0.25x")
    ax2.set(xlabel="context tokens", ylabel="translation time / native prefill", title="cost")
    ax2.legend()
    point = meta.get("recompute")  # the operating point is the "translated" row
    for length in lengths:
        sweep = sorted(
            (r["recompute"] if r["condition"] != "translated" else point, r["retention"], r.get("cost_ratio"))
            for r in result.rows
            if r["context_tokens"] == length
            and (r["condition"].startswith("recompute@") or (r["condition"] == "translated" and point is not None))
        )
        if sweep:
            ax3.plot([f for f, _, _ in sweep], [q for _, q, _ in sweep], marker="o", label=f"{length} tok: retention")
            ax3.plot(
                [f for f, _, _ in sweep], [c or 0 for *_, c in sweep], ls=":", marker="x", label=f"{length} tok: cost"
            )
    knob_qa = sorted(
        (float(c.split("@")[1]) if c != "translated" else point, r)
        for c, r in (qa_retention or {}).items()
        if (c.startswith("recompute@") or (c == "translated" and point is not None)) and r is not None
    )
    if knob_qa:
        ax3.plot(*zip(*knob_qa, strict=True), marker="s", ls="--", label="QA retention")
    ax3.axhline(0.8, color="grey", lw=0.8, ls="--")
    ax3.set(xlabel="fraction of tokens recomputed by the target", ylabel="retention / cost ratio", title="quality knob")
    if ax3.lines[1:]:
        ax3.legend(fontsize=7)
    interim = " (interim report: samples scored so far)" if meta.get("report_only") else ""
    fig.suptitle(f"{meta.get('source')} -> {meta.get('target')}{interim}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
