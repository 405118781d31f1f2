"""Where does the gap to native prefill sit? Per continuation token, NLL under ``native``, ``none``,
the shipped operating point (``translated``) and its ``deranged`` control, summed by token class
and printed as shares of native's whole gain over no context.

    python reports/experiments/attended-recompute/tokens.py -t gemma3-270m \
        --corpus out/eval-other-prose/qa_dev_contexts.txt --samples 12 --seed 1031 --out gemma3/wiki-tokens.json
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
from compare import corpus_samples  # noqa: E402

from mot_core.cache_ops import to_model_cache  # noqa: E402
from mot_core.evaluation import _with_neighbours  # noqa: E402
from mot_core.loading import load_model  # noqa: E402
from mot_core.translation.objective import (  # noqa: E402
    continuation_logits,
    nll_per_token,
    operating_point_cache,
    prepare,
)
from mot_core.translation.translator import load_translator  # noqa: E402
from services.engines import resolve_translator_path  # noqa: E402

CONDITIONS = ("native", "none", "translated", "deranged")


def klass(piece: str) -> str:
    """A decoded token's class: ``sp+punct`` is punctuation after a space (" ,", " ." of tokenised text)."""
    if piece.strip() == "":
        return "space"
    if piece.startswith(" ") and not piece[1:2].isalnum():
        return "sp+punct"
    if not piece[:1].isalnum() and not piece.startswith(" "):
        return "punct"
    word = piece.strip()
    if word[:1].isdigit():
        return "digit"
    if word[:1].isupper():
        return "Cap"
    return "word" if piece.startswith(" ") else "subword"


def sample_parser(
    description: str, *, samples: int = 12, seed: int = 1031, corpus: Path | None = None, needs_corpus: bool = True
) -> argparse.ArgumentParser:
    """The options every script here takes (and those of ``serving-cost/``): the target, its
    translator, and the samples that ``compare.corpus_samples`` cuts (here 12 at 1024 tokens;
    ``--seed 1031``: an acceptance run's first). ``--corpus`` is required unless ``corpus`` is given
    or the script can run without one (``needs_corpus=False``: a QA mode)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--checkpoint", help="default: the shipped translator")
    parser.add_argument("--corpus", type=Path, required=needs_corpus and corpus is None, default=corpus)
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--context-tokens", type=int, default=1024)
    return parser


def models_and_translator(args: argparse.Namespace) -> tuple:
    """Source, target and the translator ``--checkpoint`` names (the shipped one by default)."""
    source, target = load_model("smollm2-135m"), load_model(args.target)
    return source, target, load_translator(args.checkpoint or resolve_translator_path(f"smollm2-135m__{target.name}"))


def main() -> None:
    parser = sample_parser(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target, translator = models_and_translator(args)
    samples = corpus_samples(args, source.tokenizer)
    rows = []
    prepare_one = lambda s: prepare(source, target, s, 64, translator.card.native_tail)  # noqa: E731
    with torch.no_grad():
        for i, p, other in tqdm(_with_neighbours(prepare_one, samples), total=len(samples)):
            caches = {
                "native": p.native_cache,
                "none": None,
                "translated": operating_point_cache(translator, p, target),
                "deranged": operating_point_cache(translator, other, target),
            }
            nll = {}
            for condition, cache in caches.items():
                model_cache = None if cache is None else to_model_cache(target, cache)
                logits = continuation_logits(target, model_cache, p.tail_ids, p.continuation_ids)
                nll[condition] = nll_per_token(logits, p.continuation_ids).flatten().tolist()
            for j, token in enumerate(p.continuation_ids[0].tolist()):
                piece = target.tokenizer.decode([token])
                rows.append({"sample": i, "pos": j, "tok": piece, "class": klass(piece)} | {c: nll[c][j] for c in nll})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows))
    total = {c: sum(r[c] for r in rows) for c in CONDITIONS}
    gain = total["none"] - total["native"]
    kept = (total["none"] - total["translated"]) / gain
    print(f"retention {kept:.3f} deranged {(total['none'] - total['deranged']) / gain:.3f}")
    print(f"{'class':10} {'n':>5} {'none-nat':>9} {'none-tr':>9} {'none-der':>9}   (shares of the total native gain)")
    for name in sorted({r["class"] for r in rows}):
        of_class = [r for r in rows if r["class"] == name]
        shares = [sum(r["none"] - r[c] for r in of_class) / gain for c in ("native", "translated", "deranged")]
        print(f"{name:10} {len(of_class):5d} " + " ".join(f"{s:9.3f}" for s in shares))


if __name__ == "__main__":
    main()
