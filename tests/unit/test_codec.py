import struct
import warnings
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import torch
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mot_core.codec import (
    MAGIC,
    PER_TOKEN,
    PREFIX_BYTES,
    SCHEMA_VERSION,
    decode,
    encode,
    join_parts,
    peek_header,
    split_blob,
)
from mot_core.errors import CodecError, FingerprintMismatchError
from mot_core.kv_cache import KVCache

FP = "a" * 64

# (batch, seq_len, kv_heads, head_dim, value_head_dim, kept length per layer)
SHAPES = {
    "gqa_hd64_sliding": (1, 37, 2, 64, 64, [37, 16, 37, 16]),
    "hd256_batch2": (2, 9, 1, 256, 256, [9, 9, 4]),
    "seq1": (1, 1, 4, 64, 64, [1, 1]),
    "empty_tail_and_mla_values": (2, 5, 3, 64, 32, [5, 0, 2]),
}
DTYPES = ["float32", "bfloat16", "float16", "int8"]


def make_cache(batch: int, seq_len: int, heads: int, hd: int, vhd: int, kept: list[int], seed: int = 0) -> KVCache:
    g = torch.Generator().manual_seed(seed)
    # Per-channel magnitudes spanning 1e-2..1e2 mimic key outlier channels.
    chan = torch.logspace(-2, 2, hd)[torch.randperm(hd, generator=g)]
    keys = [torch.randn(batch, heads, n, hd, generator=g) * chan for n in kept]
    values = [torch.randn(batch, heads, n, vhd, generator=g) for n in kept]
    token_ids = torch.randint(0, 2**31 - 1, (batch, seq_len), generator=g)
    return KVCache(keys, values, token_ids, FP, rope_applied=bool(seed % 2))


def small_cache(seed: int = 0) -> KVCache:
    return make_cache(1, 3, 2, 4, 4, [3, 2], seed)


def assert_int8_close(original: torch.Tensor, decoded: torch.Tensor) -> None:
    # Symmetric rounding to the nearest multiple of scale = absmax/127 errs by at most scale/2,
    # i.e. absmax/254 per (batch, head, channel); 1e-6 * absmax covers float32 arithmetic.
    if original.numel() == 0:
        return
    absmax = original.abs().amax(dim=2, keepdim=True)
    assert bool(((original - decoded).abs() <= absmax * (1 / 254 + 1e-6)).all())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_round_trip(shape: tuple, dtype: str) -> None:
    cache = make_cache(*shape, seed=len(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "non-writable buffer" warning
        out = decode(encode(cache, dtype))
    assert out.fingerprint == cache.fingerprint and out.rope_applied == cache.rope_applied
    assert out.token_ids.dtype == torch.int64 and torch.equal(out.token_ids, cache.token_ids)
    assert out.num_layers == cache.num_layers
    for orig, got in zip([*cache.keys, *cache.values], [*out.keys, *out.values], strict=True):
        assert got.shape == orig.shape
        if dtype == "int8":
            assert got.dtype == torch.float32
            assert_int8_close(orig, got)
        else:
            storage = getattr(torch, dtype)
            assert got.dtype == storage
            # Exactly the storage-dtype rounding of the input: 2^-8 (bf16) / 2^-11 (fp16) relative.
            assert torch.equal(got, orig.to(storage))


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_to_requested_dtype(dtype: str) -> None:
    cache = make_cache(*SHAPES["gqa_hd64_sliding"])
    out = decode(encode(cache, getattr(torch, dtype)), dtype=torch.float32)
    assert all(t.dtype == torch.float32 for t in (*out.keys, *out.values))
    ref = decode(encode(cache, dtype))
    for a, b in zip(out.keys, ref.keys, strict=True):
        assert torch.equal(a, b.to(torch.float32))
    assert decode(encode(cache, dtype), dtype=torch.bfloat16).dtype == torch.bfloat16


def test_int8_zero_channels_and_exact_grid() -> None:
    k = torch.zeros(1, 2, 4, 8)
    k[0, 0, :, 0] = torch.tensor([-127.0, 0.0, 1.0, 127.0])  # exactly representable with scale 1
    cache = KVCache([k], [torch.zeros(1, 2, 4, 8)], torch.zeros(1, 4, dtype=torch.int64), FP)
    out = decode(encode(cache, "int8"))
    assert torch.equal(out.keys[0], k) and torch.equal(out.values[0], cache.values[0])


def test_int8_rejects_non_finite() -> None:
    cache = small_cache()
    cache.keys[0][0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        encode(cache, "int8")


def test_encode_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="storage dtype"):
        encode(small_cache(), "float64")
    cache = small_cache()
    cache.token_ids[0, 0] = 2**31
    with pytest.raises(ValueError, match="int32"):
        encode(cache)
    cache = small_cache()
    cache.keys[1] = cache.keys[1][:, :1]  # mutated after construction: heads no longer match
    with pytest.raises(ValueError, match="layer 1"):
        encode(cache)


def test_decoded_tensors_own_their_memory() -> None:
    cache = small_cache()
    blob = bytearray(encode(cache, "float32"))
    out = decode(blob)
    blob[PREFIX_BYTES:] = bytes(len(blob) - PREFIX_BYTES)  # scribbling on the blob must not leak in
    assert torch.equal(out.keys[0], cache.keys[0])
    out.keys[0].add_(1)  # writable
    out.keys[0].resize_(100)  # torch-allocated storage, not a view into a foreign buffer
    assert torch.equal(decode(memoryview(encode(cache, "float32"))).values[1], cache.values[1])


def test_input_tensors_are_not_modified() -> None:
    cache = small_cache()
    before = [t.clone() for t in cache.keys]
    for dtype in DTYPES:
        encode(cache, dtype)
    assert all(torch.equal(a, b) for a, b in zip(before, cache.keys, strict=True))
    cache.keys[0].resize_(1000)  # still resizable: encode never exposed it to numpy
    cache.token_ids.resize_(1000)


def test_non_contiguous_and_grad_inputs() -> None:
    full = torch.randn(1, 2, 10, 8, requires_grad=True)
    tail = full[:, :, -4:]  # sliding-window tail: a non-contiguous view that requires grad
    values = tail.detach().transpose(2, 3).contiguous().transpose(2, 3)  # channels-first layout
    cache = KVCache([tail], [values], torch.arange(10)[None], FP)
    out = decode(encode(cache, "float32"))
    assert torch.equal(out.keys[0], tail.detach()) and torch.equal(out.values[0], values)


def test_zero_layers() -> None:
    cache = KVCache([], [], torch.arange(3)[None], FP)
    out = decode(encode(cache))
    assert out.num_layers == 0 and torch.equal(out.token_ids, cache.token_ids)


def test_peek_header() -> None:
    blob = encode(make_cache(*SHAPES["hd256_batch2"]), "float16")
    assert peek_header(blob) == {
        "version": 3,
        "fingerprint": FP,
        "dtype": "float16",
        "rope_applied": False,
        "batch": 2,
        "num_layers": 3,
        "seq_len": 9,
        "surprisal": False,
        "tail_attention": False,
        "nbytes": len(blob),
    }
    with pytest.raises(CodecError, match="checksum"):
        peek_header(blob[:-1] + bytes([blob[-1] ^ 1]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("present", [("surprisal",), ("tail_attention",), PER_TOKEN])
def test_per_token_notes_round_trip_exactly_in_every_storage_dtype(dtype: str, present: tuple[str, ...]) -> None:
    cache = make_cache(*SHAPES["hd256_batch2"])
    for seed, name in enumerate(present):
        setattr(cache, name, torch.rand(cache.token_ids.shape, generator=torch.Generator().manual_seed(seed)) * 12)
    blob = encode(cache, dtype)
    out = decode(blob)
    for name in PER_TOKEN:
        assert peek_header(blob)[name] is (name in present)
        if name in present:
            assert torch.equal(getattr(out, name), getattr(cache, name))  # float32 whatever the cache's dtype
        else:
            assert getattr(out, name) is None
    without = decode(encode(make_cache(*SHAPES["hd256_batch2"]), dtype))
    assert all(torch.equal(a, b) for a, b in zip(out.values, without.values, strict=True))  # layers still in place


@pytest.mark.parametrize("name", PER_TOKEN)
def test_per_token_notes_must_be_finite(name: str) -> None:
    cache = small_cache()
    setattr(cache, name, torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        encode(cache)
    cache.surprisal = torch.tensor([[0.0, 2.0, 1.0]])
    cache.tail_attention = torch.tensor([[0.0, 0.5, 0.5]])
    header, payload = split(encode(cache))
    start = 3 * 4 + 3 * 4 * PER_TOKEN.index(name)  # after the int32 token ids, in PER_TOKEN order
    nan = struct.pack("<f", float("nan"))
    forged = forge(header, payload[: start + 4] + nan + payload[start + 8 :])  # a valid checksum
    with pytest.raises(CodecError, match=f"{name} must be finite"):
        decode(forged)


def test_expected_fingerprint() -> None:
    blob = encode(small_cache())
    assert decode(blob, expected_fingerprint=FP).fingerprint == FP
    with pytest.raises(FingerprintMismatchError):
        decode(blob, expected_fingerprint="b" * 64)


# ---------------------------------------------------------------------------------------------- bad blobs


def forge(header: Any, payload: bytes = b"") -> bytes:
    """A blob with a valid checksum around an arbitrary header, to reach the header validator."""
    raw = header if isinstance(header, bytes) else msgpack.packb(header)
    checksum = xxhash.xxh3_128_digest(raw + payload)
    return struct.pack("<6sHI16s", MAGIC, SCHEMA_VERSION, len(raw), checksum) + raw + payload


def split(blob: bytes) -> tuple[dict, bytes]:
    header_len = struct.unpack_from("<I", blob, 8)[0]
    raw = blob[PREFIX_BYTES : PREFIX_BYTES + header_len]
    return msgpack.unpackb(raw), blob[PREFIX_BYTES + header_len :]


def test_every_truncation_fails() -> None:
    blob = encode(small_cache(), "int8")
    for cut in range(len(blob)):
        with pytest.raises(CodecError):
            decode(blob[:cut])
    with pytest.raises(CodecError, match=rf"truncated: expected {len(blob)} bytes, got {len(blob) - 1}"):
        decode(blob[:-1])
    with pytest.raises(CodecError, match="trailing data"):
        decode(blob + b"\x00")


def test_clear_messages() -> None:
    blob = encode(small_cache())
    with pytest.raises(CodecError, match=r"bad magic"):
        decode(b"PK\x03\x04" + blob[4:])
    with pytest.raises(CodecError, match=r"unsupported schema version 7 \(this build reads 3\)"):
        decode(blob[:6] + struct.pack("<H", 7) + blob[8:])
    with pytest.raises(CodecError, match=r"unsupported schema version 2 \(this build reads 3\)"):
        decode(blob[:6] + struct.pack("<H", 2) + blob[8:])  # the service drops such an entry and prefills again
    with pytest.raises(CodecError, match="checksum mismatch: blob is corrupted"):
        decode(blob[:-1] + bytes([blob[-1] ^ 0x40]))
    with pytest.raises(CodecError, match="truncated"):
        decode(b"")
    with pytest.raises(TypeError):
        decode("not bytes")  # type: ignore[arg-type]


def _valid_header() -> tuple[dict, bytes]:
    return split(encode(small_cache(), "int8"))


def _set(key: str, value: Any) -> Callable[[dict], None]:
    return lambda h: h.__setitem__(key, value)


HEADER_BREAKERS: dict[str, Callable[[dict], Any]] = {
    "missing key": lambda h: h.pop("rope_applied"),
    "extra key": _set("extra", 1),
    "version mismatch": _set("version", SCHEMA_VERSION + 1),
    "bool as int": _set("version", True),
    "fingerprint not str": _set("fingerprint", 5),
    "unknown dtype": _set("dtype", "float64"),
    "rope not bool": _set("rope_applied", 1),
    "surprisal not bool": _set("surprisal", 1),
    "surprisal claimed, no buffer": _set("surprisal", True),
    "tail attention not bool": _set("tail_attention", 0),
    "tail attention claimed, no buffer": _set("tail_attention", True),
    "token shape 3-D": _set("token_ids", [1, 3, 1]),
    "negative dim": lambda h: h["layers"][0][0].__setitem__(3, -4),
    "float dim": lambda h: h["layers"][0][0].__setitem__(3, 4.0),
    "huge dim": lambda h: h["token_ids"].__setitem__(0, 2**40),
    "k/v heads differ": lambda h: h["layers"][0][1].__setitem__(1, 1),
    "batch differs from tokens": _set("token_ids", [2, 3]),
    "kept longer than seq": _set("token_ids", [1, 2]),
    "layer not a pair": lambda h: h["layers"].__setitem__(0, [[1, 2, 3, 4]]),
    "buffers do not tile": lambda h: h["buffers"][1].__setitem__(0, 1),
    "buffer count": lambda h: h["buffers"].pop(),
    "buffer entry": lambda h: h["buffers"].__setitem__(0, {"offset": 0}),
    "layers not list": _set("layers", {}),
    "mixed key types": lambda h: (h.pop("dtype"), h.__setitem__(b"", 1)),
}


@pytest.mark.parametrize("breaker", HEADER_BREAKERS.values(), ids=HEADER_BREAKERS.keys())
def test_header_validator(breaker: Callable[[dict], Any]) -> None:
    header, payload = _valid_header()
    breaker(header)
    with pytest.raises(CodecError, match="corrupt header"):
        decode(forge(header, payload))


def test_header_msgpack_edge_cases() -> None:
    header, payload = _valid_header()
    packed = msgpack.packb(header)
    with pytest.raises(CodecError, match="corrupt header"):  # map with "dtype" twice
        decode(forge(b"\x88" + packed[1:] + msgpack.packb("dtype") + msgpack.packb("int8"), payload))
    with pytest.raises(CodecError, match="corrupt header"):  # binary where str is expected
        decode(forge({**header, "fingerprint": b"abc"}, payload))
    with pytest.raises(CodecError, match="corrupt header"):
        decode(forge(packed + b"\x00", payload))
    with pytest.raises(CodecError, match="expected a msgpack map"):
        decode(forge([1, 2, 3], payload))
    scale_at = header["buffers"][2][0]  # tokens, layer 0 keys, layer 0 key scales
    with pytest.raises(CodecError, match="corrupt payload"):
        decode(forge(header, payload[:scale_at] + struct.pack("<f", float("nan")) + payload[scale_at + 4 :]))


# ---------------------------------------------------------------------------------------------- parts


@pytest.mark.parametrize("part_bytes", [1, 7, 100, 10**9])
def test_split_join_round_trip(part_bytes: int) -> None:
    cache = small_cache()
    blob = encode(cache)
    parts = split_blob(blob, part_bytes)
    assert all(0 < len(p) <= part_bytes for p in parts) and join_parts(parts) == blob
    assert torch.equal(decode(join_parts(parts)).keys[0], cache.keys[0].to(torch.bfloat16))


def test_missing_or_reordered_part_fails() -> None:
    blob = encode(make_cache(*SHAPES["seq1"]))
    parts = split_blob(blob, 64)
    assert len(parts) > 3
    for broken in (parts[:-1], parts[1:], parts[:2] + parts[3:], [parts[1], parts[0], *parts[2:]]):
        with pytest.raises(CodecError):
            decode(join_parts(broken))
    for i in range(2, len(parts) - 1):  # equal-sized parts swapped: only the checksum can tell
        with pytest.raises(CodecError, match="checksum"):
            decode(join_parts([*parts[:i], parts[i + 1], parts[i], *parts[i + 2 :]]))
    with pytest.raises(ValueError):
        split_blob(blob, 0)


# ---------------------------------------------------------------------------------------------- fuzz

FUZZ_CACHES = {dtype: small_cache(seed=3) for dtype in ("bfloat16", "int8")}
FUZZ_BLOBS = {dtype: encode(cache, dtype) for dtype, cache in FUZZ_CACHES.items()}
FUZZ = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw: st.DrawFn, blob: bytes) -> bytes:
    """Byte flips, insertions, deletions, truncations or plain random bytes."""
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "random"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "random":
            data = bytearray(draw(st.binary(max_size=200)))
    return bytes(data)


def check_decode(blob: bytes, original: bytes, cache: KVCache | None) -> KVCache | None:
    try:
        out = decode(blob)
    except CodecError:
        return None
    if cache is not None:  # raw mutations: only the unchanged blob may decode
        assert blob == original
        ref = decode(original)
        assert all(torch.equal(a, b) for a, b in zip([*out.keys, *out.values], [*ref.keys, *ref.values], strict=True))
    return out


@pytest.mark.parametrize("dtype", FUZZ_BLOBS)
@FUZZ
@given(data=st.data())
def test_fuzz_raw_bytes(dtype: str, data: st.DataObject) -> None:
    blob = FUZZ_BLOBS[dtype]
    check_decode(data.draw(mutated(blob)), blob, FUZZ_CACHES[dtype])


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.sampled_from(["float32", "bfloat16", "float16", "int8", "version", "layers"]),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=12,
)


def _paths(obj: Any, path: tuple = ()) -> list[tuple]:
    """Every location inside a header (map keys and list indexes), for targeted replacement."""
    out = [path]
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for k, v in items:
        out += _paths(v, (*path, k))
    return out


@pytest.mark.parametrize("dtype", FUZZ_BLOBS)
@FUZZ
@given(data=st.data())
def test_fuzz_header_with_valid_checksum(dtype: str, data: st.DataObject) -> None:
    header, payload = split(FUZZ_BLOBS[dtype])
    if data.draw(st.booleans()):  # structural: replace, drop or add a value somewhere in the map
        path = data.draw(st.sampled_from(_paths(header)))
        value = data.draw(msgpack_values | st.integers(-2, 64))
        if not path:
            header = value
        else:
            parent = header
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()):
                parent[path[-1]] = value
            elif isinstance(parent, dict):
                parent.pop(path[-1])
            else:
                parent.append(value)
        raw = msgpack.packb(header)
    else:  # byte level: mutate the msgpack encoding itself
        raw = data.draw(mutated(msgpack.packb(header)))
    payload = data.draw(st.sampled_from([payload, payload[:-4], payload + b"\x00" * 4, b""]))
    out = check_decode(forge(raw, payload), FUZZ_BLOBS[dtype], None)
    if out is not None:  # a still-valid header (e.g. another fingerprint) must give a valid cache
        assert isinstance(out, KVCache)
        assert decode(encode(out, dtype if dtype != "int8" else "float32")).num_layers == out.num_layers
