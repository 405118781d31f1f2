"""Two checkpoints that separate the exact layer 0 from the learnt first-layer map (diagnosis).

- ``E``: the shipped translator with the target's own layer 0 and nothing else (the first-layer map
  at zero, so layers 1.. are the shipped ones): what the exact layer 0 alone does.
- ``Fp``: a translator trained with ``--first-layer-input`` (its map kept), with layer 0 predicted
  by its own layer-0 weights again (never trained while layer 0 was exact, so the shipped ones).

    python reports/experiments/first-layer-input/layer0_variants.py --trained F/smollm2-135m__gemma3-270m --out V
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mot_core.translation.translator import load_translator
from services.engines import resolve_translator_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shipped", default="smollm2-135m__gemma3-270m")
    parser.add_argument("--trained", type=Path, required=True, help="a translator trained with --first-layer-input")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trained = load_translator(args.trained)
    shipped = load_translator(resolve_translator_path(args.shipped))
    # E: the map is zero, so the standardisation statistics (the trained one's) change nothing
    exact_only = shipped.with_first_layer_input(trained.first_layer_mean[None].expand(2, -1), exact=True)
    exact_only.first_layer_mean.copy_(trained.first_layer_mean)
    exact_only.first_layer_std.copy_(trained.first_layer_std)
    exact_only.save(args.out / "E")
    trained.card.config["exact_first_layer"] = False
    trained.exact_first_layer = False
    trained.save(args.out / "Fp")
    print(f"wrote {args.out / 'E'} ({exact_only.card.version}) and {args.out / 'Fp'} ({trained.card.version})")


if __name__ == "__main__":
    main()
