"""Exceptions that callers are expected to catch and report in one line.

Everything the library raises on bad input derives from ``MotError``, so the CLI and the
service can turn it into a clear message (or a gRPC status) without a traceback.
"""


class MotError(Exception):
    """Base class for expected, user-facing failures."""


class UnknownModelError(MotError):
    """A model name is neither a zoo name, a local directory, nor a loadable Hugging Face id."""


class DownloadError(MotError):
    """A wheel could not be fetched from the package index or failed verification."""


class CodecError(MotError):
    """Bytes are not a valid encoded KV cache (corrupted, truncated, foreign or wrong version)."""


class FingerprintMismatchError(MotError):
    """A cache was produced by a different model than the one it is being loaded into."""


class UnsupportedArchitectureError(MotError):
    """A model config lacks the facts (layers, heads, RoPE) the cache toolkit needs."""
