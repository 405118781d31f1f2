"""``mot translator``: a trained checkpoint's card, and re-saving it with how it is served changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mot_core.errors import MotError
from services.cli.options import TranslatorArg, check_selection


def translator_show(translator: TranslatorArg) -> None:
    """Print a checkpoint's card: version, pair, operating point, shape, how it was trained, what it measured."""
    from mot_core.translation.translator import WEIGHTS_FILE
    from services.engines import read_translator_card, resolve_translator_path

    directory, card = resolve_translator_path(translator), read_translator_card(translator)
    size = (directory / WEIGHTS_FILE).stat().st_size / 1e6
    point = card.operating_point
    typer.echo(f"{directory}: {card.version} ({card.kind}, {size:.1f} MB)")
    typer.echo(f"pair: {card.source_model} -> {card.target_model}, native tail {card.native_tail}")
    typer.echo(f"operating point: {point.label if point else 'pure translation (no recompute)'}")
    for key in ("config", "recipe", "metrics"):
        typer.echo(f"{key}: {json.dumps(getattr(card, key))}")


def translator_set(
    translator: TranslatorArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint directory to write (may be the input's).")],
    top_k: Annotated[int | None, typer.Option(min=1, help="Experts the router sends each token to.")] = None,
    recompute: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Fraction of the context the target recomputes itself.")
    ] = None,
    recompute_recent: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Of --recompute, the share taken from the context's end.")
    ] = None,
    recompute_attended: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Of --recompute, the share the context's last tokens read most (as the source saw it).",
        ),
    ] = None,
    recompute_selection: Annotated[
        str | None, typer.Option(help="How the rest of --recompute is chosen: phrases, words, surprisal, ...")
    ] = None,
) -> None:
    """Re-save a trained translator with how it is served changed, its weights unchanged: the router's
    top-k, the operating point (what is not given stays as the card has it).

    Serving with fewer experts than trained is cheaper on a CPU (the experts run per token on its
    chosen ones); the operating point trades cost for quality (`mot eval --sweep`). Measure the
    result with `mot eval --checkpoint` before shipping it. A new top-k is a new version: the card
    names its parent and keeps the parent's training-time metrics under `parent`. The operating
    point is written to the card (translated caches are stored under a key that names it)."""
    from dataclasses import replace

    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import load_translator, stored_dtype
    from services.engines import resolve_translator_path

    check_selection(recompute_selection)
    directory = resolve_translator_path(translator)
    loaded = load_translator(directory)
    parent_version, before = loaded.card.version, loaded.card.operating_point
    if top_k is not None:
        if not isinstance(loaded, MixtureTranslator):
            raise MotError(f"{directory} is a {loaded.kind} translator: it has no router")
        try:
            loaded = loaded.with_top_k(top_k)
        except ValueError as exc:
            raise MotError(str(exc)) from None
    point = {
        "recompute_fraction": recompute,
        "recompute_recent": recompute_recent,
        "recompute_attended": recompute_attended,
        "recompute_selection": recompute_selection,
    }
    loaded.card = replace(loaded.card, **{k: v for k, v in point.items() if v is not None})  # checks the point
    loaded.save(out, dtype=stored_dtype(directory))
    after = loaded.card.operating_point
    typer.echo(
        f"{out}: {loaded.card.version} (from {parent_version}); top-k {getattr(loaded, 'top_k', '-')}, "
        f"operating point {before.label if before else 'none'} -> {after.label if after else 'none'}"
    )
