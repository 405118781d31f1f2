"""How much of the Wikipedia-style text's loss is its tokenised spacing?

The acceptance text "Wikipedia-style" is qa_dev's contexts joined, and qa_dev's contexts are
Natural Questions passages as NQ stores them: tokenised, with a space before every comma, full
stop and clitic ("Christie 's novel , following"). A model reading the text natively learns that
pattern from the context itself, a gain a translated cache does not carry
(``../attended-recompute/``: 38% of Gemma-3's native gain there is the spaced punctuation). This
scores the shipped translator at its card's operating point on the text as it is and on the same
text with the spacing undone (``detokenise``), each on its own ``cut_samples`` draw. A diagnosis:
the acceptance text stays what it is; nothing here chooses anything.

    python reports/experiments/spacing/probe.py -t gemma3-270m --samples 12 --seed 1031 \
        --out reports/experiments/spacing/gemma3.json
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "through-recompute"))
sys.path.insert(0, str(Path(__file__).parents[1] / "attended-recompute"))
from compare import score_variants  # noqa: E402
from tokens import models_and_translator, sample_parser  # noqa: E402

WIKI_STYLE = Path("out/eval-other-prose/qa_dev_contexts.txt")  # written by `make eval-other-prose`


def detokenise(text: str) -> str:
    """NQ's tokenised spacing undone: no space before closing punctuation and clitics, none after
    opening brackets, none around a hyphen between two words."""
    text = re.sub(r" ([,.;:!?%)\]])", r"\1", text)
    text = re.sub(r"([(\[$]) ", r"\1", text)
    text = re.sub(r" ('s|'re|'ve|'ll|'d|n't|')(?=\W)", r"\1", text)
    return re.sub(r"(\w) - (\w)", r"\1-\2", text)


def main() -> None:
    parser = sample_parser(__doc__, samples=12, seed=1031, corpus=WIKI_STYLE)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source, target, shipped = models_and_translator(args)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        detokenised = Path(tmp) / "detokenised.txt"
        detokenised.write_text(detokenise(args.corpus.read_text(encoding="utf-8")), encoding="utf-8")
        for name, corpus in (("as is", args.corpus), ("detokenised", detokenised)):
            args.corpus = corpus
            result[name] = score_variants(args, source, target, {"op": shipped}, shipped.card.native_tail)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
