"""A translator with context attention, its block's output map zeroed: what it computes without the block.

    python reports/experiments/context-attention/without_block.py A/smollm2-135m__qwen2.5-0.5b --out A0

Scored beside the translator itself (``../through-recompute/compare.py``), it says how much of the
fine-tuned translator's quality comes through the block and how much from its other weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from mot_core.translation.translator import load_translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    translator = load_translator(args.checkpoint)
    if not getattr(translator, "reads_context", False):
        raise SystemExit(f"{args.checkpoint} has no context attention")
    with torch.no_grad():
        translator.context_map.zero_()
    print(f"{translator.card.version} without its block -> {translator.save(args.out)} ({translator.card.version})")


if __name__ == "__main__":
    main()
