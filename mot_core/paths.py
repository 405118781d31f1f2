"""Where the library keeps pulled models, data and downloads (``MOT_HOME``)."""

import json
import os
from collections.abc import Iterable
from pathlib import Path


def mot_home() -> Path:
    """Cache root: ``$MOT_HOME`` or ``~/.cache/mot``. Created on first use."""
    root = Path(os.environ.get("MOT_HOME") or Path.home() / ".cache" / "mot").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def models_dir() -> Path:
    return mot_home() / "models"


def data_dir() -> Path:
    return mot_home() / "data"


def downloads_dir() -> Path:
    return mot_home() / "downloads"


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """One JSON object per line, whole or not at all: written beside ``path``, then renamed onto it,
    so an interrupted pull never leaves a half corpus that the next run would take as done."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    partial.replace(path)
