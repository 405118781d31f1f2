"""Wikipedia training articles: wikitext to prose, redirects and stubs skipped, split by title,
and no article that shares a run of words with a held-out QA context."""

import bz2
import hashlib
import json

import pytest

from mot_core import encyclopedia
from mot_core.errors import DownloadError
from tests.unit.wheel_fixtures import lay_wheel

PROSE = " ".join(f"Sentence {i} tells of the river town number {i * 3} and its mill." for i in range(60))
WIKITEXT = (
    "[[File:Mill.jpg|thumb|A mill]]\n{{Infobox town|name=Millford}}\n'''Millford''' is a [[town]]. " + PROSE + "\n"
    "== History ==\nFounded in 1820 by [[John Smith (miller)|John Smith]].\n"
    "== References ==\n* {{cite book|title=Mills}}\n[[Category:Towns]]\n"
)
QA_PASSAGE = "Millford is a town . Sentence 3 tells of the river town number 9 and its mill . Sentence 4 tells"


def _page(title: str, text: str, namespace: int = 0) -> str:
    return f"<page><title>{title}</title><ns>{namespace}</ns><revision><text>{text}</text></revision></page>"


def _dump(pages: list[str]) -> bytes:
    xml = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">' + "".join(pages) + "</mediawiki>"
    return bz2.compress(xml.encode())


def test_wikitext_becomes_prose_without_images_templates_or_references():
    text = encyclopedia.plain_text(WIKITEXT)
    assert text.startswith("Millford is a town.")
    assert "Founded in 1820 by John Smith." in text  # piped links keep their shown text
    for markup in ("thumb", "Infobox", "[[", "'''", "cite book", "Category", "References"):
        assert markup not in text


def test_only_real_articles_of_the_main_namespace_are_kept():
    dump = _dump(
        [
            _page("Millford", WIKITEXT),
            _page("Milford", "#REDIRECT [[Millford]]"),
            _page("Talk:Millford", WIKITEXT, namespace=1),
            _page("Stub", "'''Stub''' is short."),
        ]
    )
    articles = encyclopedia.articles_from_dump(dump)
    assert [title for title, _ in articles] == ["Millford"]


def test_articles_sharing_a_run_of_words_with_a_held_out_passage_are_dropped():
    other = ("Otherton", " ".join(f"Line {i} is about a quiet harbour and {i} boats." for i in range(60)))
    millford = ("Millford", encyclopedia.plain_text(WIKITEXT))
    kept, dropped = encyclopedia.decontaminate([millford, other], [QA_PASSAGE])
    assert kept == [other] and dropped == ["Millford"]  # spaced punctuation still matches
    kept, dropped = encyclopedia.decontaminate([millford, other], ["Sentence 3 tells of the river town"])
    assert kept == [millford, other] and not dropped  # shorter than a run: no evidence of overlap


def _lay_wheel(tmp_path, monkeypatch, dump: bytes) -> None:
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    lay_wheel(tmp_path, encyclopedia.WIKI_WHEEL, "wiki", encyclopedia.WIKI_MEMBER, dump)


def test_pull_splits_by_title_records_what_it_dropped_and_runs_once(tmp_path, monkeypatch):
    towns = [f"Town{i}" for i in range(30)]
    body = [WIKITEXT.replace("Millford", town).replace("river town", f"{town} river") for town in towns]
    dump = _dump([_page(town, text) for town, text in zip(towns, body, strict=True)])
    _lay_wheel(tmp_path, monkeypatch, dump)
    monkeypatch.setattr(encyclopedia, "WIKI_SHA256", hashlib.sha256(dump).hexdigest())
    held_out = [encyclopedia.plain_text(body[5])[:400]]
    root = encyclopedia.pull_wiki(held_out)
    sides = {
        s: [json.loads(x)["name"] for x in (root / f"{s}.jsonl").read_text().splitlines()] for s in ("train", "dev")
    }
    assert sorted(sides["train"] + sides["dev"]) == sorted(set(towns) - {"Town5"})
    assert sides["dev"] and all(encyclopedia.is_dev(t) for t in sides["dev"])
    assert not any(encyclopedia.is_dev(t) for t in sides["train"])
    split = json.loads((root / "split.json").read_text())
    assert split["dropped_for_overlap"] == ["Town5"] and split["license"].startswith("CC BY-SA")
    assert not (tmp_path / "downloads" / "wiki").exists()  # the wheel is not kept
    (root / "dev.jsonl").write_text("kept")
    assert encyclopedia.pull_wiki(held_out) == root and (root / "dev.jsonl").read_text() == "kept"


def test_a_dump_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch):
    _lay_wheel(tmp_path, monkeypatch, _dump([_page("Millford", WIKITEXT)]))
    with pytest.raises(DownloadError, match="does not match pinned"):
        encyclopedia.pull_wiki([])
