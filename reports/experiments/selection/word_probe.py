"""Single surprising tokens or whole words? Which neighbours of a surprising token to recompute.

The token selection (``surprisal``) spends its budget on the first token of a surprising name
("Leonardo") and rarely on the rest ("da Vinci"), which the target needs to copy it. This
compares, at the same number of recomputed tokens, groups grown around the most surprising
tokens (``select``: greedy, most surprising token first, until the budget is spent):

- ``surprisal``: the token alone,
- ``prev1next1``: the token and its two neighbours,
- ``word``: the whole word holding it,
- ``prev+word`` / ``prev+word+next``: the word and the token before it (and after it),
- ``alnum-word`` (what ``recompute.blend`` now does, ``selection="words"``) / ``alnum-prev+word``:
  the same, but tokens without a letter or digit (spaces, punctuation) are taken last,
- ``oracle``: the answer's tokens and 3 on each side (qa_selection_probe.answer_span).

Words are split here from the context's characters (a word starts after whitespace or at a
non-alphanumeric character); ``recompute.word_index`` applies the same rule to the decoded token
pieces, which is what serving has. Run on qa_dev items that ``mot eval --qa-items 100`` does not
use (``--offset 100``), so the choice made here is not scored on the items it was chosen on:

    python reports/experiments/selection/word_probe.py --target qwen2.5-0.5b --offset 100 --items 100
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from qa_selection_probe import answer_span, print_table, qa_items
from tqdm import tqdm

from mot_core.cache_ops import recompute_positions
from mot_core.evaluation import answers_right
from mot_core.loading import load_model
from mot_core.translation.objective import prepare, translated_cache
from mot_core.translation.recompute import OperatingPoint
from mot_core.translation.samples import Sample
from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def text_words(spans: list[tuple[int, int]], text: str) -> torch.Tensor:
    """Word index per target token, from the characters each token covers."""
    ids, word, previous_end = [], -1, None
    for i, (a, b) in enumerate(spans):
        piece = text[a:b]
        starts = (
            i == 0
            or a == b
            or a > previous_end
            or (a > 0 and text[a - 1].isspace())
            or not piece[:1].isalnum()
            or not text[a - 1 : a].isalnum()
        )
        word += starts
        ids.append(word)
        previous_end = b
    return torch.tensor(ids)


def select(scores: torch.Tensor, group: Callable[[int], list[int]], budget: int, keep: int) -> torch.Tensor:
    """Grow ``group(c)`` around the highest-scoring tokens first until ``budget`` tokens are chosen."""
    chosen: list[int] = []
    for c in (scores[1:keep].argsort(descending=True) + 1).tolist():
        chosen += [q for q in group(c) if 1 <= q < keep and q not in chosen][: budget - len(chosen)]
        if len(chosen) >= budget:
            break
    return torch.tensor(sorted(chosen), dtype=torch.long)


def selections(p, text: str, budget: int) -> dict[str, torch.Tensor]:
    keep = p.keep
    s = p.surprisal[:keep]
    words = text_words(p.alignment.target_spans, text)[:keep]
    alnum = torch.tensor([any(ch.isalnum() for ch in text[a:b]) for a, b in p.alignment.target_spans[:keep]])
    alnum_s = torch.where(alnum, s, torch.zeros_like(s))

    def word(c: int) -> list[int]:
        return (words == words[c]).nonzero().flatten().tolist()

    def prev_word(c: int) -> list[int]:
        return [word(c)[0] - 1, *word(c)]

    return {
        "surprisal": select(s, lambda c: [c], budget, keep),
        "prev1next1": select(s, lambda c: [c, c - 1, c + 1], budget, keep),
        "word": select(s, word, budget, keep),
        "prev+word": select(s, prev_word, budget, keep),
        "prev+word+next": select(s, lambda c: [*prev_word(c), word(c)[-1] + 1], budget, keep),
        "alnum-word": select(alnum_s, word, budget, keep),
        "alnum-prev+word": select(alnum_s, prev_word, budget, keep),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--offset", type=int, default=100, help="first qa_dev item (mot eval uses 0-99)")
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--fractions", default="0.1,0.15")
    args = parser.parse_args()
    torch.set_num_threads(2)
    source, target = load_model("smollm2-135m"), load_model(args.target)
    translator = load_translator(resolve_translator_path(f"smollm2-135m__{args.target}")).eval()
    items = qa_items(args.offset, args.items)
    fractions = [float(f) for f in args.fractions.split(",")]
    right: dict[str, int] = {}
    for item in tqdm(items, desc="qa", unit="item"):
        p = prepare(source, target, Sample(item["context"], " ", -1), 1, translator.card.native_tail)
        every = translated_cache(translator, p, target, OperatingPoint(0.0))
        caches = {"native": p.native_cache, "none": None}
        caches["oracle"] = recompute_positions(target, every, answer_span(p, item, p.keep))
        for f in fractions:
            for name, positions in selections(p, item["context"], round(f * p.keep)).items():
                caches[f"{name}@{f:g}"] = recompute_positions(target, every, positions)
        for name, cache in caches.items():
            right[name] = right.get(name, 0) + answers_right(target, p, item, cache)
    print_table(f"{len(items)} items from {args.offset}, {args.target}", right, len(items))


if __name__ == "__main__":
    main()
