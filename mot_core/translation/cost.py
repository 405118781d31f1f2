"""The translator's cost bar, measured on its own: translation at a card's operating point against
the target's native prefill of the same context, side by side in one process.

``mot eval`` measures the same thing for every sample it scores (its ``cost`` column), hours into
an acceptance run; this is the few minutes' version (``mot bench-translation``), for a machine
someone wants to know the ratio on. The ratio depends on the hardware: where a CPU has no
bfloat16 matmuls the translator runs in float32 (``translator.serving_dtype``).

Both time each context's translation as the fastest of back-to-back calls; a served request
translates a context once. So the first call of each context is reported too: it pays for
whatever the repeats find ready (on a CPU with bfloat16 matmuls, a kernel for every matmul shape
not met before, 0.11-0.20 s of a Gemma-3 translation until ``mixture.ROW_BUCKET`` made the
shapes repeat from one context to the next).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from mot_core.benchmarks import timed_runs
from mot_core.evaluation import Variant, time_translation, translation_call
from mot_core.loading import LoadedModel
from mot_core.translation.objective import prepare
from mot_core.translation.samples import Sample
from mot_core.translation.translator import CacheTranslator


@dataclass
class TranslationCost:
    """Per sample, native prefill and translation seconds (each the fastest of back-to-back runs),
    and the first translation of each sample (``first_s``: what a context translated once pays)."""

    target: str
    translator: str
    operating_point: str  # the card's (``OperatingPoint.label``), or "none": pure translation
    native_s: list[float]
    translate_s: list[float]
    first_s: list[float]

    @property
    def ratios(self) -> list[float]:
        return [t / n for t, n in zip(self.translate_s, self.native_s, strict=True)]

    @property
    def first_ratios(self) -> list[float]:
        return [t / n for t, n in zip(self.first_s, self.native_s, strict=True)]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def median_first_ratio(self) -> float:
        return statistics.median(self.first_ratios)

    @property
    def median_native_s(self) -> float:
        return statistics.median(self.native_s)

    @property
    def median_translate_s(self) -> float:
        return statistics.median(self.translate_s)


def translation_cost(
    source: LoadedModel, target: LoadedModel, translator: CacheTranslator, samples: list[Sample]
) -> TranslationCost:
    """Timed as ``mot eval`` times its cost column (``evaluation.time_translation``): the alignment,
    the translator, the head, the recompute and loading into the model, not the source's prefill,
    which runs once per context for every target; and before them the first translation of each
    context."""
    variant = Variant(point=translator.card.operating_point)
    native_s, translate_s, first_s = [], [], []
    for sample in samples:
        prepared = prepare(source, target, sample, 1, translator.card.native_tail)
        first_s += timed_runs(translation_call(source, target, translator, prepared, sample.context, variant), 1)
        native, translated = time_translation(source, target, translator, prepared, sample.context, {"op": variant})
        native_s.append(native)
        translate_s.append(translated["op"])
    label = variant.point.label if variant.point is not None else "none"
    return TranslationCost(target.name, translator.card.version, label, native_s, translate_s, first_s)
