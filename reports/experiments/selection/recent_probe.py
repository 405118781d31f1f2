"""How much of the recompute budget should go to the context's last tokens, at which fraction?

A continuation leans most on the text just before it; a question leans on the facts wherever they
are. At a recompute fraction ``f`` (or several, side by side), this moves a share ``r`` of the
budget from the most surprising words to the last ``r * T`` tokens of the context
(``blend`` at ``OperatingPoint(f, recent=r)``) and reports, side by side, the continuation's NLL retention on held-out
validation contexts (a seed that ``mot eval --seed 7`` does not draw) and QA accuracy on qa_dev
items that ``mot eval --qa-items 100`` does not use (``--offset 100``), so the share chosen here
is not scored on what it was chosen on (the acceptance run's 1,000 items include them:
reports/eval-acceptance/README.md):

    python reports/experiments/selection/recent_probe.py --target gemma3-270m --fraction 0.1 \
        --recent 0,0.02,0.03,0.05,0.1
"""

from __future__ import annotations

import argparse

import torch
from qa_selection_probe import print_table, qa_items
from tqdm import tqdm

from mot_core.cache_ops import to_model_cache
from mot_core.data import pull_corpus
from mot_core.evaluation import answers_right, retention
from mot_core.loading import load_model
from mot_core.translation.objective import continuation_logits, nll_per_token, prepare, translated_cache
from mot_core.translation.recompute import OperatingPoint, blend
from mot_core.translation.samples import Sample, cut_samples
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument(
        "--fraction", required=True, help="recompute fraction (the operating point); comma-separated to compare several"
    )
    parser.add_argument("--recent", default="0,0.03,0.05", help="shares of the context taken from its end")
    parser.add_argument("--samples", type=int, default=10, help="1024-token validation contexts (0: QA only)")
    parser.add_argument("--seed", type=int, default=99, help="mot eval --seed 7 cuts its 1024-token samples with 1031")
    parser.add_argument("--offset", type=int, default=100, help="first qa_dev item (mot eval uses 0-99)")
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--ridge", help="a ridge baseline's directory (mot eval caches it under $MOT_HOME/ridge)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(resolve_translator_path(f"smollm2-135m__{args.target}")).eval()
    ridge = load_translator(args.ridge).eval() if args.ridge else None
    tail = translator.card.native_tail
    points = {
        f"words@{float(f):g} recent {float(r):g}": (float(f), float(r))
        for f in args.fraction.split(",")
        for r in args.recent.split(",")
    }

    def caches(p):
        every = translated_cache(translator, p, target, OperatingPoint(0.0))
        blended = {name: blend(target, every, OperatingPoint(f, recent=r)) for name, (f, r) in points.items()}
        baseline = {"ridge": translated_cache(ridge, p, target)} if ridge is not None else {}
        return {"native": p.native_cache, "none": None, "translated": translated_cache(translator, p, target)} | (
            baseline | blended
        )

    documents = pull_corpus().texts("validation")
    samples = cut_samples(documents, source.tokenizer, context_tokens=1024, count=args.samples, seed=args.seed)
    nll: dict[str, float] = {}
    for sample in tqdm(samples, desc="nll", unit="ctx"):
        p = prepare(source, target, sample, 64, tail)
        for name, cache in caches(p).items():
            model_cache = None if cache is None else to_model_cache(target, cache)
            logits = continuation_logits(target, model_cache, p.tail_ids, p.continuation_ids)
            nll[name] = nll.get(name, 0.0) + nll_per_token(logits, p.continuation_ids).sum().item()
    if samples:
        print(f"{len(samples)} validation contexts of 1024 tokens (seed {args.seed}), {args.target}")
        print("| condition | NLL retention |\n|---|---|")
        for name, value in nll.items():
            print(f"| {name} | {retention(nll['none'], value, nll['native']):.3f} |")

    if args.items == 0:
        return
    right: dict[str, int] = {}
    items = qa_items(args.offset, args.items)
    for item in tqdm(items, desc="qa", unit="item"):
        p = prepare(source, target, Sample(item["context"], " ", -1), 1, tail)
        for name, cache in caches(p).items():
            right[name] = right.get(name, 0) + answers_right(target, p, item, cache)
    print_table(f"{len(items)} items from {args.offset}, {args.target}", right, len(items))


if __name__ == "__main__":
    main()
