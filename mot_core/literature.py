"""A fourth kind of prose, for training: literature (a novel and an epic poem, public domain).

The translators learn register by register (reports/experiments/register-mix/): speeches, news
and Wikipedia articles each lift text of their own kind and leave *Moby-Dick* where it was. These
are the two literary texts of the Canterbury compression corpus, as Brotli ships them in its source
archive's test data (``brotli==1.1.0``, ``tests/testdata/``): Lewis Carroll's *Alice's Adventures
in Wonderland* (1865, prose fiction) and John Milton's *Paradise Lost* (1667, blank verse), both
Project Gutenberg texts. Neither is *Moby-Dick*, which stays an untouched test.

Sections: Alice's twelve chapters and Milton's twelve books, each one document. Alice's prose is
hard-wrapped at 65 columns, so its paragraphs are joined into lines (as *Moby-Dick*'s are); the
verse keeps its lines. Split (deterministic): a section goes to dev when
``int(sha256(its title), 16) % 4 == 0``, else to train.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mot_core.paths import data_dir, downloads_dir, write_jsonl
from mot_core.pypi_fetch import sdist_members

LITERATURE_SDIST = "brotli==1.1.0"
DEV_MODULUS = 4


@dataclass(frozen=True)
class Work:
    title: str
    member: str
    sha256: str
    heading: str  # a regular expression matching the line that opens each section
    prose: bool  # hard-wrapped paragraphs to join (verse keeps its lines)


WORKS = (
    Work(
        "Alice's Adventures in Wonderland",
        "tests/testdata/alice29.txt",
        "7467306ee0feed4971260f3c87421154a05be571d944e9cb021a5713700c38f0",
        r"CHAPTER [IVXL]+",
        prose=True,
    ),
    Work(
        "Paradise Lost",
        "tests/testdata/plrabn12.txt",
        "07e2e0b461af78c7c647cb53dab39de560198e16f799b4516eccf0fbd69f764c",
        r"Book [IVXL]+",
        prose=False,
    ),
)
_END_MARK = re.compile(r"^\s*\[?THE END\]?\s*$", re.IGNORECASE)


def literature_root() -> Path:
    return data_dir() / "literature"


def is_dev(title: str) -> bool:
    return int(hashlib.sha256(title.encode()).hexdigest(), 16) % DEV_MODULUS == 0


def sections(work: Work, raw: bytes) -> list[tuple[str, str]]:
    """``(title, text)`` per chapter or book; front matter (a Gutenberg preamble) and the closing
    mark are left out. The title is the work's and the section's, e.g. ``Paradise Lost, Book IV``."""
    heading = re.compile(rf"^\s*({work.heading})\s*$")
    found: list[tuple[str, list[str]]] = []
    for line in raw.decode("utf-8").replace("\x1a", "").splitlines():  # DOS end-of-file marks
        if match := heading.match(line):
            found.append((f"{work.title}, {match.group(1)}", []))
        elif found and not _END_MARK.match(line):
            found[-1][1].append(line.rstrip())
    return [(title, _paragraphs(lines, work.prose)) for title, lines in found]


def _paragraphs(lines: list[str], prose: bool) -> str:
    blocks, block = [], []
    for line in [*lines, ""]:
        if line.strip():
            block.append(line.strip())
        elif block:
            blocks.append(" ".join(block) if prose else "\n".join(block))
            block = []
    return "\n\n".join(blocks)


def pull_literature() -> Path:
    """Fetch the source archive, write ``train.jsonl`` and ``dev.jsonl``; idempotent (present files
    mean done)."""
    root = literature_root()
    if (root / "train.jsonl").is_file() and (root / "dev.jsonl").is_file():
        return root
    downloads = downloads_dir() / "literature"
    texts = sdist_members(LITERATURE_SDIST, {work.member: work.sha256 for work in WORKS}, downloads)
    documents = [section for work in WORKS for section in sections(work, texts[work.member])]
    root.mkdir(parents=True, exist_ok=True)
    for side in ("train", "dev"):
        chosen = (d for d in documents if is_dev(d[0]) == (side == "dev"))
        write_jsonl(root / f"{side}.jsonl", ({"name": title, "text": text} for title, text in chosen))
    shutil.rmtree(downloads, ignore_errors=True)
    return root
