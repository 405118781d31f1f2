"""Cost of the operating points side by side: translation (alignment, translator, head, recompute
and, with an attended share, the native tail's observation pass; loading into the model) over the
target's native prefill, per sample the fastest of ``evaluation.TIMING_REPEATS`` runs each, as
``mot eval`` times them; medians over samples. Run it on an idle machine.

    python reports/experiments/attended-recompute/timing.py -t gemma3-270m --samples 5
"""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

from mot_core.allocator import retain_freed_memory  # noqa: E402
from mot_core.evaluation import Variant, time_translation  # noqa: E402
from mot_core.paths import mot_home  # noqa: E402
from mot_core.translation.objective import prepare  # noqa: E402
from mot_core.translation.recompute import OperatingPoint  # noqa: E402


def main() -> None:
    parser = sample_parser(__doc__, samples=5, seed=7, corpus=mot_home() / "data/sotu/validation.jsonl")
    parser.add_argument("--attended", type=float, default=0.03, help="the attended share of A and B")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does
    source, target, translator = models_and_translator(args)
    card = translator.card
    fraction, recent, selection = card.recompute_fraction, card.recompute_recent, card.recompute_selection
    variants = {
        "shipped": Variant(point=OperatingPoint(fraction, selection, recent)),
        "A": Variant(point=OperatingPoint(fraction, selection, recent, args.attended)),
        "B": Variant(point=OperatingPoint(fraction, selection, attended=recent)),
    }
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for sample in corpus_samples(args, source.tokenizer):
        prepared = prepare(source, target, sample, 64, card.native_tail)
        native_s, translate_s = time_translation(source, target, translator, prepared, sample.context, variants)
        for name, seconds in translate_s.items():
            ratios[name].append(seconds / native_s)
        print({name: round(r[-1], 4) for name, r in ratios.items()}, f"native {native_s:.3f} s", flush=True)
    medians = {name: statistics.median(r) for name, r in ratios.items()}
    print("median translation / native prefill:", {name: round(m, 4) for name, m in medians.items()})
    if args.out:
        args.out.write_text(json.dumps({"samples": args.samples, "ratios": ratios, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
