"""Stable identifiers for shared contexts: the key under which a context's KV caches are stored.

Two requests share a cache only if the models saw exactly the same text, so the id hashes the
text itself (SHA-256 of its UTF-8 bytes), never Python's salted ``hash()``: it is identical in
every process, on every host, in every release.

Normalisation is deliberately minimal. Unicode NFC and newline unification (``"\\r\\n"`` and a
lone ``"\\r"`` become ``"\\n"``) only undo differences that come from how text was typed,
stored or transported, and that users never mean. Everything else is kept: tokenisers treat
spaces, tabs, trailing newlines and case as content, so collapsing them would give two texts
that tokenise differently the same id, and a cache built for one would be loaded for the other.
Callers must feed the model the normalised text (``normalize_text`` / ``join_documents``) so
that the cache stored under an id matches the text the id names.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence

DOCUMENT_SEPARATOR = "\n\n"
"""Joins documents into one context: a blank line, the paragraph break every tokeniser knows."""


def normalize_text(text: str) -> str:
    """NFC, then CRLF / lone CR to LF; nothing else (whitespace is significant to tokenisers)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")


def join_documents(docs: Sequence[str]) -> str:
    """The exact text to feed the model for several documents: each normalised, then joined by
    :data:`DOCUMENT_SEPARATOR`. ``context_id(docs) == context_id(join_documents(docs))``."""
    if isinstance(docs, str | bytes | bytearray) or not isinstance(docs, Sequence):
        raise TypeError(f"documents must be a sequence of str, got {type(docs).__name__}")
    return DOCUMENT_SEPARATOR.join(normalize_text(doc) for doc in docs)


def context_id(text_or_documents: str | Sequence[str]) -> str:
    """SHA-256 hex digest of the normalised UTF-8 text (documents are joined first)."""
    if isinstance(text_or_documents, str):
        text = normalize_text(text_or_documents)
    else:
        text = join_documents(text_or_documents)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
