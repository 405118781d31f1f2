import hashlib
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mot_core.context_id import DOCUMENT_SEPARATOR, context_id, join_documents, normalize_text

REPO_ROOT = Path(__file__).resolve().parents[2]
FOX = "The quick brown fox jumps over the lazy dog"


def test_known_digest() -> None:
    # The published SHA-256 test vector for this sentence, and hashlib for a non-ASCII text.
    assert context_id(FOX) == "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592"
    text = "Grüße, 世界\n"
    assert context_id(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_nfc_and_nfd_are_the_same_context() -> None:
    nfc = "café naïve Ångström"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    assert normalize_text(nfd) == nfc
    assert context_id(nfd) == context_id(nfc)


def test_newlines_are_unified() -> None:
    assert normalize_text("a\r\nb\rc\n") == "a\nb\nc\n"
    assert context_id("line1\r\nline2\r\n") == context_id("line1\nline2\n") == context_id("line1\rline2\r")
    assert normalize_text("\r\r\n") == "\n\n"


@pytest.mark.parametrize(
    "other",
    [FOX + ".", FOX + "\n", FOX.lower(), FOX.replace(" ", "  "), FOX.replace(" ", "\t"), " " + FOX, ""],
)
def test_different_texts_differ(other: str) -> None:
    # Whitespace and case are content to a tokeniser: they must change the id.
    assert context_id(other) != context_id(FOX)


def test_documents_are_joined_with_the_separator() -> None:
    docs = ["First doc.", "Second\r\ndoc.", unicodedata.normalize("NFD", "Third é")]
    joined = join_documents(docs)
    assert joined == "First doc." + DOCUMENT_SEPARATOR + "Second\ndoc." + DOCUMENT_SEPARATOR + "Third é"
    assert context_id(docs) == context_id(joined) == context_id(tuple(docs))
    assert context_id(["only"]) == context_id("only")
    assert context_id(["a", "b"]) != context_id(["b", "a"])
    assert context_id(["a", "b"]) != context_id(["a b"])


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8")), max_size=4))
def test_join_documents_is_already_normalised(docs: list[str]) -> None:
    joined = join_documents(docs)
    assert normalize_text(joined) == joined
    assert context_id(docs) == context_id(joined)


@pytest.mark.parametrize("bad", [b"bytes", 42, None, [b"x"], ["ok", 3], iter(["a"])])
def test_rejects_non_str(bad: object) -> None:
    with pytest.raises(TypeError):
        context_id(bad)  # type: ignore[arg-type]


def test_normalize_rejects_non_str() -> None:
    with pytest.raises(TypeError):
        normalize_text(b"abc")  # type: ignore[arg-type]


def test_same_id_in_another_process() -> None:
    samples = [FOX, "Grüße\r\n世界", ["doc one", "doc two"]]
    code = (
        "import json, sys; from mot_core.context_id import context_id; "
        "print(json.dumps([context_id(s) for s in json.loads(sys.argv[1])]))"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        argv = [sys.executable, "-c", code, json.dumps(samples)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        assert json.loads(out) == [context_id(s) for s in samples]
