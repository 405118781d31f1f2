"""Encode a :class:`KVCache` to bytes and back, without pickle.

Caches travel between processes and hosts (stores, gRPC), so the format must be safe to parse
from untrusted bytes, self-describing, cheap to verify and fast. Every decode failure is a
:class:`CodecError` with a one-line reason; nothing in here ever unpickles or evaluates data.

Blob layout (all integers little-endian)::

    offset  size  field
    0       6     MAGIC = b"MOTKV\\x00"
    6       2     schema version, uint16 (currently 3; version 2 had no "tail_attention", 1 no "surprisal")
    8       4     header_len, uint32: length of the msgpack header that follows
    12      16    checksum: xxhash.xxh3_128(header bytes + payload bytes).digest()
    28      H     header: one msgpack map (H = header_len)
    28+H    P     payload: raw buffers concatenated in the order listed below, no padding

The checksum does not cover the 28-byte prefix; it needs no cover: the magic and version must
match exactly, and a wrong header_len makes the header fail to parse as exactly one map.

The header is a msgpack map with exactly these keys::

    "version":      int, equal to the schema version in the prefix
    "fingerprint":  str, the owning model's fingerprint
    "dtype":        str, storage dtype: "float32" | "bfloat16" | "float16" | "int8"
    "rope_applied": bool
    "token_ids":    [batch, seq_len]
    "surprisal":    bool: whether the per-token surprisal buffer follows the token ids
    "tail_attention": bool: whether the per-token tail-attention buffer follows (after the surprisal)
    "layers":       [[key_shape, value_shape], ...], one entry per layer, each shape
                    [batch, kv_heads, kept_len, head_dim] (value head_dim may differ)
    "buffers":      [[offset, length], ...], one entry per payload buffer, offsets relative to
                    the payload start; they must tile the payload exactly

Payload buffers, in order:

1. token ids: int32, ``batch * seq_len`` values.
2. only if "surprisal": float32, ``batch * seq_len`` values (``KVCache.surprisal``).
3. only if "tail_attention": float32, ``batch * seq_len`` values (``KVCache.tail_attention``).
4. for each layer: the keys, then the values. For float storage each is the tensor in the
   storage dtype (bfloat16 as its raw 16-bit pattern). For int8 storage each tensor is
   followed by its scales: the int8 tensor ``q``, then float32 scales of shape
   ``[batch, kv_heads, head_dim]`` (that tensor's head_dim); ``x ~= q * scale`` where, per
   (batch, head, channel), ``scale = absmax over the token axis / 127`` (1.0 where the channel
   is all zero, or the tensor holds no positions).
   Symmetric per-channel quantisation keeps each element within ``absmax / 254`` of the
   original; per-channel (not per-token) because key outliers live in fixed channels.

Large caches can be cut into parts for stores with value size limits (:func:`split_blob`);
the parts are plain slices, so :func:`join_parts` + :func:`decode` re-verify the whole checksum
and a missing or reordered part fails as truncation, bad magic or a checksum mismatch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import torch
import xxhash

from mot_core.errors import CodecError, FingerprintMismatchError
from mot_core.kv_cache import PER_TOKEN, KVCache

MAGIC = b"MOTKV\x00"
SCHEMA_VERSION = 3
MAX_BLOB_BYTES = 4 << 30  # 4 GiB: far above any single cache we ship, small enough to refuse junk
MAX_HEADER_BYTES = 1 << 20  # ~20 bytes per layer in practice; 1 MiB leaves room for 16k layers
MAX_LAYERS = 1 << 14
MAX_FINGERPRINT_CHARS = 4096
MAX_DIM = (1 << 31) - 1

_PREFIX = struct.Struct("<6sHI16s")  # magic, version, header_len, checksum
PREFIX_BYTES = _PREFIX.size  # 28

_STORAGE = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int8": torch.int8,
}
_HEADER_KEYS = frozenset(
    {"version", "fingerprint", "dtype", "rope_applied", "token_ids", *PER_TOKEN, "layers", "buffers"}
)
_TOKEN_ITEMSIZE = 4  # int32
_SCALE_ITEMSIZE = 4  # float32
_PER_TOKEN_ITEMSIZE = 4  # float32


@dataclass(frozen=True)
class _Header:
    fingerprint: str
    dtype: str
    rope_applied: bool
    token_shape: tuple[int, int]
    per_token: tuple[str, ...]  # the PER_TOKEN buffers present, in payload order
    layers: list[tuple[tuple[int, ...], tuple[int, ...]]]
    buffers: list[tuple[int, int]]
    payload_len: int


# ---------------------------------------------------------------------------------------------- encode


def _storage_name(dtype: str | torch.dtype) -> str:
    for name, torch_dtype in _STORAGE.items():
        if dtype == name or dtype == torch_dtype:
            return name
    raise ValueError(f"unsupported storage dtype {dtype!r}; use one of {', '.join(_STORAGE)}")


def _owned(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A fresh contiguous CPU copy in ``dtype`` (one pass when converting anyway). Never hand the
    caller's own tensor to ``.numpy()``: that makes its storage non-resizable for good."""
    return t.detach().to("cpu", dtype, copy=True, memory_format=torch.contiguous_format)


def _as_bytes(t: torch.Tensor) -> memoryview:
    """Little-endian bytes of a contiguous CPU tensor that this module owns, without a copy."""
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: ship the raw 16-bit patterns
        t = t.view(torch.int16)
    arr = t.numpy().reshape(-1)
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return memoryview(arr.view(np.uint8))


def quantise_int8(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one float32 scale per slice along ``dim`` (``x ~= q * scale``; the scale
    has ``x``'s shape with ``dim`` of size 1). Caches reduce over the token axis, weights over
    their input axis."""
    x = x.to(torch.float32)
    if x.shape[dim] == 0:
        scale_shape = list(x.shape)
        scale_shape[dim] = 1
        return torch.empty(x.shape, dtype=torch.int8), torch.ones(scale_shape)
    absmax = x.abs().amax(dim=dim, keepdim=True)  # (torch.aminmax is ~15x slower on caches)
    if not bool(torch.isfinite(absmax).all()):
        raise ValueError("int8 storage cannot represent NaN/inf values; use a float storage dtype")
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    q = torch.div(x, scale).round_().clamp_(-127, 127).to(torch.int8)
    return q, scale


def _check_cache(cache: KVCache) -> None:
    if not isinstance(cache, KVCache):
        raise TypeError(f"expected a KVCache, got {type(cache).__name__}")
    if not isinstance(cache.fingerprint, str) or len(cache.fingerprint) > MAX_FINGERPRINT_CHARS:
        raise ValueError(f"fingerprint must be a str of at most {MAX_FINGERPRINT_CHARS} characters")
    if not isinstance(cache.rope_applied, bool):
        raise TypeError("rope_applied must be a bool")
    cache.__post_init__()  # the lists are mutable: re-check so we never write an undecodable blob
    if cache.num_layers > MAX_LAYERS:
        raise ValueError(f"{cache.num_layers} layers exceeds the limit of {MAX_LAYERS}")
    tok = cache.token_ids
    if tok.is_floating_point() or tok.is_complex() or tok.dtype == torch.bool:
        raise TypeError(f"token_ids must be an integer tensor, got {tok.dtype}")
    if tok.numel() and (int(tok.min()) < -(1 << 31) or int(tok.max()) >= 1 << 31):
        raise ValueError("token ids do not fit in int32")
    for name in PER_TOKEN:
        per_token = getattr(cache, name)
        if per_token is not None and not bool(torch.isfinite(per_token).all()):
            raise ValueError(f"{name} must be finite floats")
    for t in (*cache.keys, *cache.values):
        if not t.is_floating_point():
            raise TypeError(f"keys/values must be floating point, got {t.dtype}")


def encode(cache: KVCache, dtype: str | torch.dtype = "bfloat16") -> bytes:
    """Serialise ``cache`` in the storage ``dtype`` (see the module docstring for the layout)."""
    name = _storage_name(dtype)
    _check_cache(cache)
    storage = _STORAGE[name]
    parts: list[memoryview] = [_as_bytes(_owned(cache.token_ids, torch.int32))]
    for per_token in (getattr(cache, note) for note in PER_TOKEN):
        if per_token is not None:
            parts.append(_as_bytes(_owned(per_token, torch.float32)))
    layers = []
    for k, v in zip(cache.keys, cache.values, strict=True):
        layers.append([list(k.shape), list(v.shape)])
        for t in (k, v):
            if name == "int8":
                q, scale = quantise_int8(t.detach().cpu(), dim=2)  # per (batch, head, channel)
                parts += [_as_bytes(q), _as_bytes(scale)]
            else:
                parts.append(_as_bytes(_owned(t, storage)))
    buffers, offset = [], 0
    for part in parts:
        buffers.append([offset, part.nbytes])
        offset += part.nbytes
    header = msgpack.packb(
        {
            "version": SCHEMA_VERSION,
            "fingerprint": cache.fingerprint,
            "dtype": name,
            "rope_applied": cache.rope_applied,
            "token_ids": list(cache.token_ids.shape),
            **{note: getattr(cache, note) is not None for note in PER_TOKEN},
            "layers": layers,
            "buffers": buffers,
        }
    )
    total = PREFIX_BYTES + len(header) + offset
    if len(header) > MAX_HEADER_BYTES or total > MAX_BLOB_BYTES:
        raise ValueError(f"cache too large to encode: {total} bytes (limit {MAX_BLOB_BYTES})")
    hasher = xxhash.xxh3_128(header)
    for part in parts:
        hasher.update(part)
    prefix = _PREFIX.pack(MAGIC, SCHEMA_VERSION, len(header), hasher.digest())
    return b"".join([prefix, header, *parts])


# ---------------------------------------------------------------------------------------------- decode


def _unpack(raw: memoryview) -> Any:
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            max_bin_len=0,
            max_ext_len=0,
            max_str_len=MAX_FINGERPRINT_CHARS,
            max_array_len=4 * MAX_LAYERS + 1,
            max_map_len=len(_HEADER_KEYS),  # with the exact key check, this also rules out duplicates
        )
    except Exception as exc:  # msgpack raises a zoo of types on malformed input
        raise CodecError(f"corrupt header: not valid msgpack ({type(exc).__name__}: {exc})") from exc


def _shape(value: Any, ndim: int, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) != ndim:
        raise CodecError(f"corrupt header: {what} must be a list of {ndim} ints")
    if not all(type(d) is int and 0 <= d <= MAX_DIM for d in value):
        raise CodecError(f"corrupt header: {what} has an invalid dimension: {value!r:.80}")
    return tuple(value)


def _field(header: dict[str, Any], key: str, kind: type) -> Any:
    value = header[key]
    if type(value) is not kind:
        raise CodecError(f"corrupt header: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _expected_lengths(dtype: str, token_shape: tuple[int, int], per_token: tuple[str, ...], layers: list) -> list[int]:
    """Byte length of every payload buffer, in payload order, implied by the shapes."""
    itemsize = _STORAGE[dtype].itemsize
    lengths = [_numel(token_shape) * _TOKEN_ITEMSIZE]
    lengths += [_numel(token_shape) * _PER_TOKEN_ITEMSIZE] * len(per_token)
    for kv in layers:
        for shape in kv:
            lengths.append(_numel(shape) * itemsize)
            if dtype == "int8":
                b, h, _, d = shape
                lengths.append(b * h * d * _SCALE_ITEMSIZE)
    return lengths


def _parse_header(raw: memoryview) -> _Header:
    header = _unpack(raw)
    if not isinstance(header, dict):
        raise CodecError(f"corrupt header: expected a msgpack map, got {type(header).__name__}")
    if set(header) != _HEADER_KEYS:
        missing, extra = sorted(_HEADER_KEYS - set(header)), sorted(set(header) - _HEADER_KEYS, key=repr)
        raise CodecError(f"corrupt header: missing keys {missing}, unexpected keys {extra}")
    version = _field(header, "version", int)
    if version != SCHEMA_VERSION:
        raise CodecError(f"corrupt header: schema version {version}, prefix says {SCHEMA_VERSION}")
    fingerprint = _field(header, "fingerprint", str)
    dtype = _field(header, "dtype", str)
    if dtype not in _STORAGE:
        raise CodecError(f"corrupt header: unknown storage dtype {dtype!r}")
    rope_applied = _field(header, "rope_applied", bool)
    batch, seq_len = token_shape = _shape(header["token_ids"], 2, "token_ids shape")
    per_token = tuple(name for name in PER_TOKEN if _field(header, name, bool))

    raw_layers = _field(header, "layers", list)
    if len(raw_layers) > MAX_LAYERS:
        raise CodecError(f"corrupt header: {len(raw_layers)} layers exceeds the limit of {MAX_LAYERS}")
    layers = []
    for i, kv in enumerate(raw_layers):
        if not isinstance(kv, list) or len(kv) != 2:
            raise CodecError(f"corrupt header: layer {i} must be [key_shape, value_shape]")
        k, v = _shape(kv[0], 4, f"layer {i} key shape"), _shape(kv[1], 4, f"layer {i} value shape")
        if k[:3] != v[:3]:
            raise CodecError(f"corrupt header: layer {i} key shape {k} vs value shape {v}")
        if k[0] != batch or k[2] > seq_len:
            raise CodecError(f"corrupt header: layer {i} shape {k} does not fit tokens [{batch}, {seq_len}]")
        layers.append((k, v))

    raw_buffers = _field(header, "buffers", list)
    expected = _expected_lengths(dtype, token_shape, per_token, layers)
    if len(raw_buffers) != len(expected):
        raise CodecError(f"corrupt header: {len(raw_buffers)} buffers listed, shapes imply {len(expected)}")
    buffers, end = [], 0
    for i, (entry, length) in enumerate(zip(raw_buffers, expected, strict=True)):
        if not isinstance(entry, list) or len(entry) != 2 or not all(type(x) is int for x in entry):
            raise CodecError(f"corrupt header: buffer {i} must be [offset, length]")
        if entry != [end, length]:
            raise CodecError(f"corrupt header: buffer {i} is {entry}, expected [{end}, {length}]")
        buffers.append((end, length))
        end += length
        if end > MAX_BLOB_BYTES:
            raise CodecError(f"corrupt header: payload exceeds the {MAX_BLOB_BYTES}-byte limit")
    return _Header(fingerprint, dtype, rope_applied, token_shape, per_token, layers, buffers, end)


def _bytes_view(blob: bytes | bytearray | memoryview) -> memoryview:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, bytearray or memoryview, got {type(blob).__name__}")
    try:
        return memoryview(blob).cast("B")
    except (TypeError, ValueError) as exc:
        raise CodecError(f"blob must be a contiguous byte buffer: {exc}") from exc


def _verified_header(mv: memoryview) -> _Header:
    """Check prefix, header, sizes and checksum; return the header (trustworthy from here on)."""
    if mv[: len(MAGIC)] != MAGIC[: len(mv)]:
        raise CodecError("not a MoT KV cache (bad magic)")
    if len(mv) > MAX_BLOB_BYTES:
        raise CodecError(f"blob of {len(mv)} bytes exceeds the {MAX_BLOB_BYTES}-byte limit")
    if len(mv) < PREFIX_BYTES:
        raise CodecError(f"truncated: expected at least {PREFIX_BYTES} bytes, got {len(mv)}")
    _, version, header_len, checksum = _PREFIX.unpack_from(mv)
    if version != SCHEMA_VERSION:
        raise CodecError(f"unsupported schema version {version} (this build reads {SCHEMA_VERSION})")
    if header_len > MAX_HEADER_BYTES:
        raise CodecError(f"header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if len(mv) < PREFIX_BYTES + header_len:
        raise CodecError(f"truncated: expected at least {PREFIX_BYTES + header_len} bytes, got {len(mv)}")
    # Parse before checking the checksum so truncation gets its own message, but report a
    # checksum mismatch ahead of header errors: random corruption is the likelier cause.
    try:
        header, header_error = _parse_header(mv[PREFIX_BYTES : PREFIX_BYTES + header_len]), None
    except CodecError as exc:
        header, header_error = None, exc
    if header is not None:
        expected = PREFIX_BYTES + header_len + header.payload_len
        if len(mv) < expected:
            raise CodecError(f"truncated: expected {expected} bytes, got {len(mv)}")
        if len(mv) > expected:
            raise CodecError(f"trailing data: expected {expected} bytes, got {len(mv)}")
    if xxhash.xxh3_128_digest(mv[PREFIX_BYTES:]) != checksum:
        raise CodecError("checksum mismatch: blob is corrupted")
    if header_error is not None:
        raise header_error
    assert header is not None
    return header


def _take(mv: memoryview, start: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    """Copy one little-endian buffer out of the blob into a fresh, writable, resizable tensor
    (``torch.frombuffer`` would alias the blob and warn on read-only bytes)."""
    storage = torch.UntypedStorage.from_buffer(mv, "little", count=_numel(shape), offset=start, dtype=dtype)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def decode(
    blob: bytes | bytearray | memoryview,
    *,
    expected_fingerprint: str | None = None,
    dtype: torch.dtype | None = None,
) -> KVCache:
    """Parse and verify ``blob``; tensors come back in the storage dtype (int8: float32) unless
    ``dtype`` is given. Raises CodecError for any invalid bytes, FingerprintMismatchError when
    ``expected_fingerprint`` is given and the cache belongs to another model."""
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    mv = _bytes_view(blob)
    header = _verified_header(mv)
    if expected_fingerprint is not None and header.fingerprint != expected_fingerprint:
        raise FingerprintMismatchError(
            f"cache belongs to model {header.fingerprint[:16]}..., not {expected_fingerprint[:16]}..."
        )
    base = len(mv) - header.payload_len
    buffers = iter(header.buffers)

    def next_tensor(torch_dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
        return _take(mv, base + next(buffers)[0], torch_dtype, shape)

    storage = _STORAGE[header.dtype]
    token_ids = next_tensor(torch.int32, header.token_shape).to(torch.int64)
    per_token = {name: next_tensor(torch.float32, header.token_shape) for name in header.per_token}
    for name, values in per_token.items():
        if not bool(torch.isfinite(values).all()):
            raise CodecError(f"corrupt payload: {name} must be finite")
    keys, values = [], []
    for shapes in header.layers:
        for shape, out in zip(shapes, (keys, values), strict=True):
            t = next_tensor(storage, shape)
            if header.dtype == "int8":
                b, h, _, d = shape
                scale = next_tensor(torch.float32, (b, h, 1, d))
                if not bool(torch.isfinite(scale).all()) or bool((scale < 0).any()):
                    raise CodecError("corrupt payload: int8 scales must be finite and non-negative")
                t = torch.mul(t, scale)  # int8 * float32 promotes to float32 in one pass
            out.append(t if dtype is None else t.to(dtype))
    try:
        return KVCache(keys, values, token_ids, header.fingerprint, header.rope_applied, **per_token)
    except ValueError as exc:  # unreachable after _parse_header; kept so decode only raises CodecError
        raise CodecError(f"corrupt header: {exc}") from exc


def peek_header(blob: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Verified summary of a blob (checksum included) without materialising any tensor.

    ``nbytes`` is the encoded size of the blob.
    """
    mv = _bytes_view(blob)
    header = _verified_header(mv)
    return {
        "version": SCHEMA_VERSION,
        "fingerprint": header.fingerprint,
        "dtype": header.dtype,
        "rope_applied": header.rope_applied,
        "batch": header.token_shape[0],
        "num_layers": len(header.layers),
        "seq_len": header.token_shape[1],
        **{name: name in header.per_token for name in PER_TOKEN},
        "nbytes": len(mv),
    }


# ---------------------------------------------------------------------------------------------- parts


def split_blob(blob: bytes, max_part_bytes: int) -> list[bytes]:
    """Cut a blob into consecutive slices of at most ``max_part_bytes`` (for size-limited stores)."""
    if type(max_part_bytes) is not int or max_part_bytes <= 0:
        raise ValueError(f"max_part_bytes must be a positive int, got {max_part_bytes!r}")
    mv = memoryview(blob).cast("B")
    return [bytes(mv[i : i + max_part_bytes]) for i in range(0, len(mv), max_part_bytes)]


def join_parts(parts: Sequence[bytes]) -> bytes:
    """Concatenate parts from :func:`split_blob`; :func:`decode` then verifies the whole."""
    return b"".join(parts)
