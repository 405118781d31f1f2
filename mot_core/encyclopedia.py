"""A third kind of prose, for training: Wikipedia articles (encyclopaedic, every topic).

The speeches and the news digests are two registers; translators trained on them keep far less of
a novel than of a speech (reports/eval-acceptance/). These are the 106 articles of the shortened
English Wikipedia dump that gensim ships as test data (``gensim==4.4.0``, the same wheel as the
news), wikitext turned into plain text by ``mwparserfromhell``. Wikipedia's text is CC BY-SA, so a
translator trained with it says so in its card (``data.wiki``).

Decontamination: ``qa_dev.jsonl``'s contexts are Natural Questions passages, i.e. Wikipedia; an
article sharing any ``OVERLAP_WORDS``-word run with one of them is dropped before the split, so no
QA context is trained on. The Wikipedia-style evaluation text (qa_dev's contexts) is still the
same *register* as this corpus: a translator trained with ``--wiki`` is judged out of domain on
*Moby-Dick* only, and its reports must say so.

Split (deterministic): an article goes to dev when ``int(sha256(title), 16) % 5 == 0``, else to
train. Articles are long (thousands of tokens), so each is one document.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from xml.etree import ElementTree

import mwparserfromhell

from mot_core.paths import data_dir, downloads_dir, write_jsonl
from mot_core.pypi_fetch import wheel_member

WIKI_WHEEL = "gensim==4.4.0"
WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKI_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
DEV_MODULUS = 5
OVERLAP_WORDS = 13
MIN_ARTICLE_CHARS = 2_000  # stubs and lists are too short for a training context
_TAIL_SECTIONS = re.compile(r"\n\s*(See also|References|External links|Notes|Further reading|Bibliography)\s*\n")
_WORD = re.compile(r"[a-z0-9]+")


def wiki_root() -> Path:
    return data_dir() / "wiki"


def is_dev(title: str) -> bool:
    return int(hashlib.sha256(title.encode()).hexdigest(), 16) % DEV_MODULUS == 0


def plain_text(wikitext: str) -> str:
    """An article's prose: images, templates and tables gone, and nothing after its reference sections."""
    code = mwparserfromhell.parse(wikitext)
    for link in code.filter_wikilinks(recursive=False):
        if str(link.title).strip().lower().startswith(("file:", "image:", "category:")):
            code.remove(link)
    text = code.strip_code(normalize=True, collapse=True)
    text = _TAIL_SECTIONS.split(text, maxsplit=1)[0]
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def articles_from_dump(dump: bytes) -> list[tuple[str, str]]:
    """``(title, plain text)`` of the main-namespace, non-redirect pages of a bz2 XML dump."""
    articles = []
    for _, element in ElementTree.iterparse(bz2.BZ2File(io.BytesIO(dump))):
        if not element.tag.endswith("}page"):
            continue
        namespace, title = element.findtext("{*}ns"), element.findtext("{*}title") or ""
        wikitext = element.findtext(".//{*}text") or ""
        element.clear()
        if namespace != "0" or wikitext.lstrip().upper().startswith("#REDIRECT"):
            continue
        text = plain_text(wikitext)
        if len(text) >= MIN_ARTICLE_CHARS:
            articles.append((title, text))
    return articles


def word_runs(text: str, n: int = OVERLAP_WORDS) -> set[tuple[str, ...]]:
    """Every run of ``n`` consecutive words, lower-cased and stripped of punctuation (so the QA set's
    spaced punctuation, ``Christie 's novel ,``, matches the article's ``Christie's novel,``)."""
    words = _WORD.findall(text.lower().replace("'", ""))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def decontaminate(articles: list[tuple[str, str]], held_out: Iterable[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Articles sharing no word run with any ``held_out`` text, and the titles dropped."""
    banned: set[tuple[str, ...]] = set()
    for text in held_out:
        banned |= word_runs(text)
    kept, dropped = [], []
    for title, text in articles:
        if word_runs(text) & banned:
            dropped.append(title)
        else:
            kept.append((title, text))
    return kept, dropped


def pull_wiki(held_out: Iterable[str]) -> Path:
    """Fetch the wheel, write ``train.jsonl``, ``dev.jsonl`` and ``split.json``; idempotent.

    ``held_out``: texts no training article may overlap (the QA set's contexts).
    """
    root = wiki_root()
    if all((root / name).is_file() for name in ("train.jsonl", "dev.jsonl", "split.json")):
        return root
    downloads = downloads_dir() / "wiki"
    dump = wheel_member(WIKI_WHEEL, WIKI_MEMBER, downloads, WIKI_SHA256)
    articles, dropped = decontaminate(articles_from_dump(dump), held_out)
    root.mkdir(parents=True, exist_ok=True)
    sides = {"train": [a for a in articles if not is_dev(a[0])], "dev": [a for a in articles if is_dev(a[0])]}
    for side, members in sides.items():
        write_jsonl(root / f"{side}.jsonl", ({"name": title, "text": text} for title, text in members))
    split = {
        "source": f"{WIKI_WHEEL} {WIKI_MEMBER}",
        "license": "CC BY-SA (Wikipedia)",
        "rule": f"dev iff int(sha256(title), 16) % {DEV_MODULUS} == 0",
        "decontaminated_against": "data/eval/qa_dev.jsonl contexts",
        "overlap_words": OVERLAP_WORDS,
        "dropped_for_overlap": dropped,
        "counts": {side: len(members) for side, members in sides.items()},
    }
    (root / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    shutil.rmtree(downloads, ignore_errors=True)
    return root
