"""Where encoded KV caches live between requests: a small store interface and its Redis backend.

Modelled on LMCache's storage backends: :class:`CacheStore` is a tiny abstract interface
(put/get/exists/delete/delete_context/stats) and :class:`RedisCacheStore` implements it with
redis-py. Values are codec blobs (``mot_core.codec.encode``); the store treats them as opaque
bytes, adds its own whole-blob checksum, and hands back exactly the bytes that were put, or a miss.

Key layout (``P = "{<namespace>}:"``; the braces are a Redis Cluster hash tag: every key of a
namespace hashes to one slot, which the Lua scripts need, as they derive part keys from the
manifest. Tested on a single Redis; that is the supported deployment)::

    P m:<entry>                  manifest (hash): v, gen, n, nbytes, chunk, xxh3, created_ms   TTL
    P p:<entry>:<gen>:<i>        part i (0..n-1) of generation <gen>: raw bytes <= chunk       TTL
    P lru                        zset  entry -> last put/hit time (microseconds since epoch)
    P meta                       hash  entry -> "<gen> <n> <nbytes>" (to find parts, release bytes)
    P bytes                      int   bytes of all entries in the namespace
    P ctx:<context_id>           set   entries of one context (for delete_context)

    <entry> = <context_id>:s:<source_fp>                                   source cache
            | <context_id>:t:<source_fp>:<target_fp>:<translator_version>   translated cache
            | <context_id>:x                                                 the context's text

Consistency. A put writes its parts under a fresh random generation first (each with the TTL,
so a crashed writer leaves nothing behind for long), then one Lua script atomically checks the
parts are all there, removes the previous version (its parts included), evicts for the budget,
and publishes the manifest, setting the *same absolute expiry* (PEXPIREAT) on the manifest and
every part. A reader fetches the manifest, then all parts in one pipelined MGET (one round trip;
MGET is atomic, so it never sees half of a generation), and verifies count, lengths and the
xxh3-128 of the whole blob. Parts of another generation are never read: an overwrite cannot mix
versions. A missing part (Redis evicted it) or a failed check is a miss, and the broken entry is
removed, only if it is still the generation the reader saw; if a writer replaced it meanwhile
the reader retries and gets the new version.

Budget (``StoreConfig.max_bytes``): the ``bytes`` counter is maintained inside the scripts. When
a put would take the namespace over budget, the least-recently-used entries (by last put or
hit) are evicted first, in the same atomic script; an entry larger than the whole budget is
refused with :class:`EntryTooLargeError`. Recency is approximate across hosts (client clocks).

Redis's own limits. Give Redis a ``maxmemory`` above the budget (per-key overhead, ~25%) and a
``maxmemory-policy`` that evicts: ``volatile-lru`` (recommended for a dedicated Redis: every
entry key has a TTL, the bookkeeping keys have none, so only cache data is ever evicted) or
``allkeys-lru``. Entries that Redis expires or evicts on its own are misses; their bookkeeping is
reclaimed lazily (each put checks the coldest few entries; :meth:`RedisCacheStore.sweep` checks
all), so ``stats().entries``/``bytes`` may briefly include them.

Errors: Redis unreachable (refused, timed out, auth failure, loading) raises
:class:`StoreUnavailableError`, so the service can answer gRPC UNAVAILABLE for cache calls and
keep serving native requests; other Redis failures raise :class:`StoreError`. The URL (with its
password) is never logged nor put into an error message.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import redis
import xxhash
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from mot_core.codec import join_parts, split_blob
from mot_core.errors import MotError
from services.config import StoreConfig

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
_COMPONENT = re.compile(r"^[A-Za-z0-9_.+=@-]{1,256}$")
_MAX_READ_ATTEMPTS = 3
_COLD_SWEEP = 16  # entries checked for Redis-side expiry/eviction on every put


# ---------------------------------------------------------------------------------------------- errors


class StoreError(MotError):
    """The cache store failed an operation (other than being unreachable)."""


class StoreUnavailableError(StoreError):
    """Redis cannot be reached (refused, timeout, authentication, loading): gRPC UNAVAILABLE."""


class EntryTooLargeError(StoreError, ValueError):
    """One entry is larger than the store's whole byte budget."""


# ---------------------------------------------------------------------------------------------- keys


def _component(value: str, what: str) -> str:
    if not isinstance(value, str) or not _COMPONENT.match(value):
        raise ValueError(f"{what} must be 1-256 characters of [A-Za-z0-9_.+=@-], got {value!r:.80}")
    return value


@dataclass(frozen=True)
class CacheKey:
    """What a cache entry is for; build with :func:`source_key` or :func:`translated_key`."""

    kind: Literal["source", "translated", "text"]
    context_id: str
    source_fingerprint: str
    target_fingerprint: str | None = None
    translator_version: str | None = None

    def __post_init__(self) -> None:
        _component(self.context_id, "context_id")
        _component(self.source_fingerprint, "source fingerprint")
        if self.kind in ("source", "text"):
            if self.target_fingerprint is not None or self.translator_version is not None:
                raise ValueError(f"a {self.kind} key has no target fingerprint or translator version")
        elif self.kind == "translated":
            _component(self.target_fingerprint, "target fingerprint")  # type: ignore[arg-type]
            _component(self.translator_version, "translator version")  # type: ignore[arg-type]
        else:
            raise ValueError(f"kind must be 'source', 'translated' or 'text', got {self.kind!r}")

    @property
    def entry_id(self) -> str:
        """Stable id inside a namespace; starts with ``<context_id>:``."""
        if self.kind == "source":
            return f"{self.context_id}:s:{self.source_fingerprint}"
        if self.kind == "text":
            return f"{self.context_id}:x"
        return f"{self.context_id}:t:{self.source_fingerprint}:{self.target_fingerprint}:{self.translator_version}"


def source_key(context_id: str, source_fingerprint: str) -> CacheKey:
    """The source model's own cache of a context."""
    return CacheKey("source", context_id, source_fingerprint)


def text_key(context_id: str) -> CacheKey:
    """The normalised text of a context (what targets tokenise and translators align)."""
    return CacheKey("text", context_id, "text")


def translated_key(
    context_id: str, source_fingerprint: str, target_fingerprint: str, translator_version: str
) -> CacheKey:
    """A cache translated from ``source_fingerprint``'s space into ``target_fingerprint``'s."""
    return CacheKey("translated", context_id, source_fingerprint, target_fingerprint, translator_version)


# ---------------------------------------------------------------------------------------------- interface


@dataclass(frozen=True)
class StoreStats:
    entries: int  # entries in the namespace (shared by every process using it)
    bytes: int  # their total size (shared)
    hits: int  # gets answered by this process's store object
    misses: int  # gets that missed (absent, expired, evicted or corrupt), this process
    evictions: int  # entries this process evicted to stay within the byte budget
    max_bytes: int


class CacheStore(ABC):
    """Interchangeable storage backends for encoded caches (opaque bytes)."""

    @abstractmethod
    def put(self, key: CacheKey, blob: bytes) -> None:
        """Store ``blob`` under ``key``, replacing any previous version atomically."""

    @abstractmethod
    def get(self, key: CacheKey) -> bytes | None:
        """The exact bytes last put under ``key``, or None (absent, expired, evicted, corrupt)."""

    @abstractmethod
    def exists(self, key: CacheKey) -> bool:
        """Cheap presence check; a later get may still miss (expiry, eviction)."""

    @abstractmethod
    def delete(self, key: CacheKey) -> bool:
        """Remove one entry; True if it was there."""

    @abstractmethod
    def delete_context(self, context_id: str) -> int:
        """Remove every entry (source and translated) of a context; returns how many."""

    @abstractmethod
    def stats(self) -> StoreStats: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (and anything the store owns)."""

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- Redis

# Shared Lua helpers. ARGV[1] is always the namespace prefix; every key is derived from it, so
# all keys of a namespace share the "{namespace}" hash tag (one cluster slot).
_LUA_PRELUDE = r"""
local P = ARGV[1]
local META, LRU, BYTES = P .. 'meta', P .. 'lru', P .. 'bytes'
local function part_key(entry, gen, i) return P .. 'p:' .. entry .. ':' .. gen .. ':' .. i end
local function del_parts(entry, gen, n)
  local batch = {}
  for i = 0, n - 1 do
    batch[#batch + 1] = part_key(entry, gen, i)
    if #batch == 500 then redis.call('DEL', unpack(batch)); batch = {} end
  end
  if #batch > 0 then redis.call('DEL', unpack(batch)) end
end
-- remove an entry, its parts and its bookkeeping; returns 1 if anything of it existed
local function remove_entry(entry)
  local mkey = P .. 'm:' .. entry
  local found, meta_gen = 0, nil
  local meta = redis.call('HGET', META, entry)
  if meta then
    local g, n, b = string.match(meta, '^(%S+) (%d+) (%d+)$')
    meta_gen = g
    del_parts(entry, g, tonumber(n))
    redis.call('HDEL', META, entry)
    redis.call('DECRBY', BYTES, b)
    found = 1
  end
  local man = redis.call('HMGET', mkey, 'gen', 'n')
  if man[1] then
    found = 1
    if man[1] ~= meta_gen and man[2] then del_parts(entry, man[1], tonumber(man[2])) end
    redis.call('DEL', mkey)
  end
  found = math.max(found, redis.call('ZREM', LRU, entry))
  local ctx = string.match(entry, '^([^:]+):')
  redis.call('SREM', P .. 'ctx:' .. ctx, entry)
  return found
end
"""

# ARGV: P, entry, gen, n, nbytes, chunk, xxh3, ttl_ms, lru_score, max_bytes, cold_sweep, manifest version
# returns {published (1/0: a part vanished before publishing), evicted}
_PUBLISH = (
    _LUA_PRELUDE
    + r"""
local entry, gen = ARGV[2], ARGV[3]
local n, nbytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl_ms, max_bytes = tonumber(ARGV[8]), tonumber(ARGV[10])
local mkey = P .. 'm:' .. entry
if redis.call('HGET', mkey, 'gen') == gen then return {1, 0} end  -- a retried publish
for i = 0, n - 1 do
  if redis.call('EXISTS', part_key(entry, gen, i)) == 0 then del_parts(entry, gen, n); return {0, 0} end
end
remove_entry(entry)  -- the previous version: its readers see missing parts and retry
for _, e in ipairs(redis.call('ZRANGE', LRU, 0, tonumber(ARGV[11]) - 1)) do
  if redis.call('EXISTS', P .. 'm:' .. e) == 0 then remove_entry(e) end  -- expired/evicted by Redis
end
local evicted = 0
while (tonumber(redis.call('GET', BYTES)) or 0) + nbytes > max_bytes do
  local victim = redis.call('ZRANGE', LRU, 0, 0)[1]
  if not victim then redis.call('SET', BYTES, 0); break end  -- nothing left: the counter had drifted
  remove_entry(victim)
  evicted = evicted + 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expire_at = now + ttl_ms
for i = 0, n - 1 do redis.call('PEXPIREAT', part_key(entry, gen, i), expire_at) end
redis.call('HSET', mkey, 'v', ARGV[12], 'gen', gen, 'n', ARGV[4], 'nbytes', ARGV[5], 'chunk', ARGV[6],
           'xxh3', ARGV[7], 'created_ms', now)
redis.call('PEXPIREAT', mkey, expire_at)
redis.call('HSET', META, entry, gen .. ' ' .. ARGV[4] .. ' ' .. ARGV[5])
redis.call('ZADD', LRU, ARGV[9], entry)
redis.call('INCRBY', BYTES, ARGV[5])
redis.call('SADD', P .. 'ctx:' .. string.match(entry, '^([^:]+):'), entry)
return {1, evicted}
"""
)

# ARGV: P, entry, seen_gen. Remove a broken entry unless a writer replaced it meanwhile.
# returns 1 (removed or already gone) or 0 (now another generation: read again)
_DROP = (
    _LUA_PRELUDE
    + r"""
local cur = redis.call('HGET', P .. 'm:' .. ARGV[2], 'gen')
if cur and cur ~= ARGV[3] then return 0 end
remove_entry(ARGV[2])
return 1
"""
)

# ARGV: P, entry. returns 1 if the entry existed
_DELETE = _LUA_PRELUDE + "\nreturn remove_entry(ARGV[2])\n"

# ARGV: P, context_id. returns the number of entries removed
_DELETE_CONTEXT = (
    _LUA_PRELUDE
    + r"""
local idx = P .. 'ctx:' .. ARGV[2]
local removed = 0
for _, e in ipairs(redis.call('SMEMBERS', idx)) do removed = removed + remove_entry(e) end
redis.call('DEL', idx)
return removed
"""
)

# ARGV: P, start rank, count. Drops entries whose manifest is gone; returns {dropped, next rank, total}
_SWEEP = (
    _LUA_PRELUDE
    + r"""
local start, count = tonumber(ARGV[2]), tonumber(ARGV[3])
local dropped = 0
local batch = redis.call('ZRANGE', LRU, start, start + count - 1)
for _, e in ipairs(batch) do
  if redis.call('EXISTS', P .. 'm:' .. e) == 0 then remove_entry(e); dropped = dropped + 1 end
end
return {dropped, start + #batch - dropped, redis.call('ZCARD', LRU)}
"""
)


def redact_url(url: str) -> str:
    """``scheme://host:port/db`` without user or password: safe for logs and errors."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"
    except ValueError:
        return "<unparseable redis url>"


@dataclass(frozen=True)
class _Manifest:
    gen: str
    n: int
    nbytes: int
    chunk: int
    xxh3: str

    @classmethod
    def parse(cls, raw: Mapping[bytes, bytes]) -> _Manifest:
        try:
            if int(raw[b"v"]) != MANIFEST_VERSION:
                raise ValueError(f"manifest version {raw[b'v']!r}")
            m = cls(
                raw[b"gen"].decode("ascii"),
                int(raw[b"n"]),
                int(raw[b"nbytes"]),
                int(raw[b"chunk"]),
                raw[b"xxh3"].decode("ascii"),
            )
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"unreadable manifest ({exc})") from exc
        if m.n < 1 or m.chunk < 1 or not (m.chunk * (m.n - 1) < m.nbytes <= m.chunk * m.n):
            raise ValueError(f"inconsistent manifest: {m.n} parts of {m.chunk} for {m.nbytes} bytes")
        return m

    def check(self, parts: list[bytes | None]) -> str | None:
        """None if the parts are exactly the blob this manifest describes, else why not."""
        if len(parts) != self.n:
            return f"{len(parts)} parts, manifest says {self.n}"
        missing = [i for i, p in enumerate(parts) if p is None]
        if missing:
            return f"part(s) {missing[:5]} missing (evicted or expired)"
        last = self.nbytes - self.chunk * (self.n - 1)
        for i, p in enumerate(parts):
            if len(p) != (self.chunk if i < self.n - 1 else last):  # type: ignore[arg-type]
                return f"part {i} has {len(p)} bytes"  # type: ignore[arg-type]
        return None


class RedisCacheStore(CacheStore):
    """The Redis backend (see the module docstring for layout, consistency and budget).

    ``url``: ``redis://[[user]:password@]host:port/db`` or ``rediss://`` for TLS (redis-py URL
    options such as ``ssl_ca_certs`` go in the query string). Nothing connects until first use,
    so a service can start while Redis is down and keep serving native requests.
    """

    def __init__(
        self,
        url: str,
        config: StoreConfig | None = None,
        *,
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retries: int = 1,
        max_connections: int | None = None,
    ) -> None:
        self.config = config or StoreConfig()
        self.where = redact_url(url)
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"Redis URL must start with redis://, rediss:// or unix://, got {self.where!r}")
        self._redis = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), retries),  # every op is idempotent
            health_check_interval=30,
            max_connections=max_connections,
        )
        self._prefix = "{" + self.config.namespace + "}:"
        self._publish = self._redis.register_script(_PUBLISH)
        self._drop = self._redis.register_script(_DROP)
        self._delete = self._redis.register_script(_DELETE)
        self._delete_context = self._redis.register_script(_DELETE_CONTEXT)
        self._sweep = self._redis.register_script(_SWEEP)
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0
        self._owned_server = None  # an EmbeddedRedis this store started (from_env) and stops on close

    @classmethod
    def from_env(
        cls, config: StoreConfig | None = None, *, env: Mapping[str, str] | None = None, **kwargs
    ) -> RedisCacheStore:
        """Connect to ``MOT_REDIS_URL``, or start a private embedded redis-server owned by the store."""
        from services.embedded_redis import redis_url_from_env_or_embedded

        url, server = redis_url_from_env_or_embedded(config, env=env)
        try:
            store = cls(url, config, **kwargs)
        except BaseException:
            if server is not None:
                server.stop()
            raise
        store._owned_server = server
        return store

    # ------------------------------------------------------------------------------------ keys

    def manifest_key(self, key: CacheKey) -> str:
        return f"{self._prefix}m:{key.entry_id}"

    def part_key(self, key: CacheKey, gen: str, index: int) -> str:
        return f"{self._prefix}p:{key.entry_id}:{gen}:{index}"

    def context_index_key(self, context_id: str) -> str:
        return f"{self._prefix}ctx:{_component(context_id, 'context_id')}"

    @property
    def bookkeeping_keys(self) -> tuple[str, str, str]:
        """The namespace's LRU zset, size hash and byte counter (no TTL by design)."""
        return f"{self._prefix}lru", f"{self._prefix}meta", f"{self._prefix}bytes"

    # ------------------------------------------------------------------------------------ operations

    @contextlib.contextmanager
    def _guard(self, op: str) -> Iterator[None]:
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # incl. auth failure, busy loading
            raise StoreUnavailableError(f"Redis at {self.where} unavailable during {op}: {exc}") from exc
        except redis.RedisError as exc:
            raise StoreError(f"Redis at {self.where} failed during {op}: {exc}") from exc

    @staticmethod
    def _now_us() -> int:
        return time.time_ns() // 1000

    def put(self, key: CacheKey, blob: bytes) -> None:
        if not isinstance(blob, bytes | bytearray | memoryview):
            raise TypeError(f"blob must be bytes, got {type(blob).__name__}")
        nbytes = memoryview(blob).nbytes
        if nbytes == 0:
            raise ValueError("refusing to store an empty blob")
        if nbytes > self.config.max_bytes:
            raise EntryTooLargeError(
                f"entry of {nbytes} bytes exceeds the store budget of {self.config.max_bytes} bytes (max_bytes)"
            )
        chunk = self.config.chunk_bytes
        parts = split_blob(blob, chunk)
        gen = secrets.token_hex(8)
        ttl_ms = self.config.ttl_seconds * 1000
        with self._guard("put"):
            pipe = self._redis.pipeline(transaction=False)
            for i, part in enumerate(parts):
                pipe.set(self.part_key(key, gen, i), part, px=ttl_ms)  # unpublished: expires if we crash
            pipe.execute()
            published, evicted = self._publish(
                args=[
                    self._prefix,
                    key.entry_id,
                    gen,
                    len(parts),
                    nbytes,
                    chunk,
                    xxhash.xxh3_128_hexdigest(blob),
                    ttl_ms,
                    self._now_us(),
                    self.config.max_bytes,
                    _COLD_SWEEP,
                    MANIFEST_VERSION,
                ]
            )
        if evicted:
            log.info("evicted %d least-recently-used entries to stay within %d bytes", evicted, self.config.max_bytes)
            with self._lock:
                self._evictions += evicted
        if not published:
            raise StoreError(
                f"Redis at {self.where} evicted part of a {nbytes}-byte entry while it was written: "
                "its maxmemory is too small for this entry"
            )

    def get(self, key: CacheKey) -> bytes | None:
        entry = key.entry_id
        for _ in range(_MAX_READ_ATTEMPTS):
            with self._guard("get"):
                raw = self._redis.hgetall(self.manifest_key(key))
            if not raw:
                return self._miss()
            try:
                manifest = _Manifest.parse(raw)
            except ValueError as exc:
                problem, parts, gen = str(exc), None, raw.get(b"gen", b"").decode("ascii", "replace")
            else:
                gen = manifest.gen
                with self._guard("get"):
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.mget([self.part_key(key, gen, i) for i in range(manifest.n)])
                    lru_key = self.bookkeeping_keys[0]
                    pipe.zadd(lru_key, {entry: self._now_us()}, xx=True)  # touch; never re-adds a removed entry
                    parts, _ = pipe.execute()
                problem = manifest.check(parts)
                if problem is None:
                    blob = join_parts(parts)
                    if xxhash.xxh3_128_hexdigest(blob) == manifest.xxh3:
                        with self._lock:
                            self._hits += 1
                        return blob
                    problem = "checksum mismatch"
            with self._guard("get"):
                removed = self._drop(args=[self._prefix, entry, gen])
            if removed:
                log.warning("cache entry %s dropped: %s", entry, problem)
                return self._miss()
            # a writer replaced the entry between our two reads: read the new version
        return self._miss()

    def _miss(self) -> None:
        with self._lock:
            self._misses += 1
        return None

    def exists(self, key: CacheKey) -> bool:
        with self._guard("exists"):
            return bool(self._redis.exists(self.manifest_key(key)))

    def delete(self, key: CacheKey) -> bool:
        with self._guard("delete"):
            return bool(self._delete(args=[self._prefix, key.entry_id]))

    def delete_context(self, context_id: str) -> int:
        _component(context_id, "context_id")
        with self._guard("delete_context"):
            return int(self._delete_context(args=[self._prefix, context_id]))

    def sweep(self, batch: int = 256) -> int:
        """Reclaim bookkeeping of entries Redis expired or evicted on its own; returns how many.
        Runs in batches (one short script each), so it never blocks Redis for long."""
        dropped, start = 0, 0
        with self._guard("sweep"):
            while True:
                n, start, total = self._sweep(args=[self._prefix, start, batch])
                dropped += int(n)
                if int(start) >= int(total):
                    return dropped

    def stats(self) -> StoreStats:
        lru, _, counter = self.bookkeeping_keys
        with self._guard("stats"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.zcard(lru)
            pipe.get(counter)
            entries, nbytes = pipe.execute()
        with self._lock:
            hits, misses, evictions = self._hits, self._misses, self._evictions
        return StoreStats(int(entries), int(nbytes or 0), hits, misses, evictions, self.config.max_bytes)

    def ping(self) -> None:
        """Raise StoreUnavailableError unless Redis answers (for readiness checks)."""
        with self._guard("ping"):
            self._redis.ping()

    def close(self) -> None:
        self._redis.close()
        server, self._owned_server = self._owned_server, None
        if server is not None:
            server.stop()

    def __repr__(self) -> str:  # never the password
        return f"RedisCacheStore({self.where}, namespace={self.config.namespace!r})"
