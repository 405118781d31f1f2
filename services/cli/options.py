"""What several commands share: argument types, parsers of list-valued options, names and paths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# the project's QA dev set (evaluation only): training corpora are checked against its contexts
QA_DEV = Path(__file__).resolve().parents[2] / "data" / "eval" / "qa_dev.jsonl"

ModelArg = Annotated[str, typer.Option("--model", "-m", help="Zoo name (see `mot models list`), local dir or HF id.")]
TranslatorArg = Annotated[
    str, typer.Argument(help="A shipped translator (`smollm2-135m__gemma3-270m`) or a checkpoint directory.")
]


def pair_name(source: str, target: str) -> str:
    """Shipped translator directory name for a pair (``checkpoints/<source>__<target>``)."""
    return f"{Path(source).name}__{Path(target).name}"


def qa_dev_contexts() -> list[str]:
    from mot_core.evaluation import read_qa_items

    return [item["context"] for item in read_qa_items(QA_DEV)]


def int_list(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {value!r}") from None


def fraction(value: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise typer.BadParameter(f"expected a fraction in [0, 1], got {value!r}") from None
    if not 0.0 <= parsed <= 1.0:
        raise typer.BadParameter(f"expected a fraction in [0, 1], got {value!r}")
    return parsed


def fraction_or_none(value: str) -> float | None:
    return None if value.strip().lower() == "none" else fraction(value)


def fraction_list(value: str) -> list[float]:
    return [fraction(v) for v in value.split(",") if v.strip()]


def check_selection(value: str | None) -> None:
    from mot_core.translation.recompute import SELECTIONS

    if value is not None and value not in SELECTIONS:
        raise typer.BadParameter(f"unknown selection {value!r}; choose from {', '.join(SELECTIONS)}")
