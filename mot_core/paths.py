"""Where the library keeps pulled models, data and downloads (``MOT_HOME``)."""

import os
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
