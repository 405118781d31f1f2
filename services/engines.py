"""What each deployment does, as plain Python: no Ray, no gRPC (those wrap these classes).

``SourceEngine`` prefills contexts and stores their caches; ``TranslatorEngine`` turns a stored
source cache into a target's cache; ``TargetEngine`` obtains a cache by the requested mode
(recomputing the translator card's share of the context over a translation) and generates or
scores on top of it. Each (context, target) stores one translated cache, the one requests read:
the translation itself, or at an operating point the target's blend of it.
Each takes a ``CacheStore``, so the same code runs against Redis in production and in tests.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from mot_core import codec
from mot_core.arch import ArchSpec
from mot_core.cache_ops import prefill, to_model_cache, trim_to_windows
from mot_core.context_id import context_id as content_id
from mot_core.context_id import normalize_text
from mot_core.errors import CodecError, FingerprintMismatchError
from mot_core.generation import Sampling, StreamState, score_continuation, stream_generate
from mot_core.kv_cache import KVCache
from mot_core.loading import LoadedModel, ModelMeta, load_model
from mot_core.translation.assemble import rows_to_cache, zero_rows
from mot_core.translation.recompute import with_native_rows
from mot_core.translation.translator import (
    CARD_FILE,
    CacheTranslator,
    TranslationResult,
    TranslatorCard,
    load_translator,
)
from services.config import Limits, ServiceConfig, StoreConfig, TargetSpec
from services.deadline import NO_DEADLINE, Deadline
from services.errors import DeadlineExceededError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from services.store import CacheStore, StoreUnavailableError, source_key, text_key, translated_key

log = logging.getLogger(__name__)

CHECKPOINTS_DIR = Path(__file__).resolve().parent.parent / "checkpoints"

# Where a target's cache came from (values match mot.v1.CacheSource names).
TRANSLATED_HIT, TRANSLATED_FRESH, NATIVE_PREFILL, NO_CONTEXT = (
    "TRANSLATED_HIT",
    "TRANSLATED_FRESH",
    "NATIVE_PREFILL",
    "NONE",
)
AUTO, TRANSLATE, NATIVE, NONE = "AUTO", "TRANSLATE", "NATIVE", "NONE"

# What a replica runs its paths on once at start (``warm_up``): a name and a number, so that the
# recompute's phrase selection has something to pick.
WARM_UP_TEXT = "On 5 March Ada Lovelace read the first page of the report aloud."


def _zero_cache(spec: ArchSpec, token_ids: torch.Tensor, fingerprint: str) -> KVCache:
    """Zeros in every position of every layer (the source's notes too): what ``warm_up`` runs paths on."""
    rows, zeros = zero_rows(spec, token_ids.shape[-1]), torch.zeros(token_ids.shape)
    return rows_to_cache(rows, spec, token_ids, fingerprint, all_positions=True, surprisal=zeros, tail_attention=zeros)


def resolve_translator_path(name: str) -> Path:
    """A shipped translator name (``checkpoints/<name>``) or a directory path."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    shipped = CHECKPOINTS_DIR / name
    if shipped.is_dir():
        return shipped
    raise InvalidArgumentError(f"translator {name!r} is neither a shipped checkpoint nor a directory")


def model_info(lm: LoadedModel, role: str, translator: CacheTranslator | None = None) -> dict:
    return {
        "name": lm.name,
        "role": role,
        "model_type": lm.spec.model_type,
        "fingerprint": lm.fingerprint.id,
        "num_layers": lm.spec.num_layers,
        "translator": translator.card.kind if translator is not None else "",
        "translator_version": translator.card.version if translator is not None else "",
    }


def read_context_text(store: CacheStore, context_id: str, known: str | None = None) -> str:
    """The context's text from the store; ``known`` (the ingress' copy) covers a store that is down or lost it."""
    try:
        raw = store.get(text_key(context_id))
    except StoreUnavailableError:
        if known is None:
            raise
        return known
    if raw is not None:
        return raw.decode("utf-8")
    if known is None:
        raise NotFoundError(f"unknown context id {context_id} (never stored, deleted or expired)")
    store.put(text_key(context_id), known.encode("utf-8"))  # e.g. Redis restarted empty
    return known


def decode_or_drop(store: CacheStore, key: str, blob: bytes | None, fingerprint: str) -> KVCache | None:
    """Decode a stored cache; a corrupted or foreign blob is logged, deleted and treated as a miss."""
    if blob is None:
        return None
    try:
        return codec.decode(blob, expected_fingerprint=fingerprint, dtype=torch.float32)
    except (CodecError, FingerprintMismatchError) as exc:
        log.warning("dropping bad cache entry %s: %s", key, exc)
        store.delete(key)
        return None


class SourceEngine:
    def __init__(self, model: str | LoadedModel, store: CacheStore, store_config: StoreConfig, limits: Limits):
        self.lm = model if isinstance(model, LoadedModel) else load_model(model)
        self.store, self.store_config, self.limits = store, store_config, limits

    def info(self) -> dict:
        return model_info(self.lm, "source")

    def warm_up(self) -> float:
        """Seconds to run the prefill once on a short text, writing nothing: the first request
        should not pay for the first forward pass (allocator pages, kernel set-up)."""
        started = time.perf_counter()
        prefill(self.lm, self.lm.tokenizer(WARM_UP_TEXT, return_tensors="pt")["input_ids"], for_targets=True)
        return time.perf_counter() - started

    def put_context(self, text: str) -> dict:
        text = normalize_text(text)
        if not text.strip():
            raise InvalidArgumentError("context is empty")
        if len(text) > self.limits.max_context_chars:
            raise InvalidArgumentError(
                f"context has {len(text)} characters; the limit is {self.limits.max_context_chars}"
            )
        ctx = content_id(text)
        key = source_key(ctx, self.lm.fingerprint.id)
        existing = self.store.get(key)
        if decode_or_drop(self.store, key, existing, self.lm.fingerprint.id) is not None:
            header = codec.peek_header(existing)
            self.store.put(text_key(ctx), text.encode("utf-8"))  # refresh its TTL too
            return self._reply(ctx, header["seq_len"], len(existing), already_cached=True)
        ids = self.lm.tokenizer(text, return_tensors="pt")["input_ids"]
        if ids.shape[-1] > self.limits.max_context_tokens:
            raise InvalidArgumentError(
                f"context has {ids.shape[-1]} tokens; the limit is {self.limits.max_context_tokens}"
            )
        cache, _ = prefill(self.lm, ids, for_targets=True)  # the targets' recompute picks tokens by it
        blob = codec.encode(cache, self.store_config.storage_dtype)
        self.store.put(text_key(ctx), text.encode("utf-8"))
        self.store.put(key, blob)
        return self._reply(ctx, cache.seq_len, len(blob), already_cached=False)

    def source_cache(self, ctx: str, known_text: str | None = None) -> bytes:
        """The stored source cache of a context, re-made from its text if evicted or corrupted."""
        key = source_key(ctx, self.lm.fingerprint.id)
        blob = self.store.get(key)
        if decode_or_drop(self.store, key, blob, self.lm.fingerprint.id) is not None:
            return blob
        text = read_context_text(self.store, ctx, known_text)
        log.info("source cache of %s missing; prefilling again", ctx[:12])
        cache, _ = prefill(self.lm, self.lm.tokenizer(text, return_tensors="pt")["input_ids"], for_targets=True)
        blob = codec.encode(cache, self.store_config.storage_dtype)
        self.store.put(key, blob)
        return blob

    def _reply(self, ctx: str, tokens: int, nbytes: int, *, already_cached: bool) -> dict:
        return {
            "context_id": ctx,
            "token_count": tokens,
            "stored_bytes": nbytes,
            "already_cached": already_cached,
            "source_model": self.lm.name,
            "source_fingerprint": self.lm.fingerprint.id,
        }


class Laps:
    """Seconds per named step of one piece of work, so its log line says where the time went."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - started

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def __str__(self) -> str:
        return ", ".join(f"{step} {seconds:.3f}" for step, seconds in self.seconds.items())


class KeyedLocks:
    """One lock per cache key: concurrent requests for the same entry wait for the first one's result.

    A key's lock lives only while someone holds or waits for it, so a replica that serves millions of
    distinct contexts keeps no lock for the ones it has finished.
    """

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._users: dict[str, int] = {}
        self._guard = threading.Lock()

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    @contextmanager
    def hold(self, key: str, deadline: Deadline, doing: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
            self._users[key] = self._users.get(key, 0) + 1
        try:
            left = deadline.remaining()
            if not lock.acquire(timeout=-1 if left is None else left):
                raise DeadlineExceededError(f"deadline exceeded while waiting for the same {doing} in progress")
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key], self._locks[key]


class TranslatorEngine:
    """All translators from the source to each target; a translation of one (context, target) runs once.

    Holds no target model's weights beyond the embedding and layer 0 of those whose translator reads
    them (``ModelMeta.first_layer``): translation needs only the tokenizers, the architecture facts
    and the translator modules. It reads source caches from the store; one missing there (evicted,
    or dropped as corrupt) is re-made by ``fetch_source`` (the source deployment).
    """

    def __init__(
        self,
        source: ModelMeta,
        targets: dict[str, ModelMeta],
        translators: dict[str, CacheTranslator],
        store: CacheStore,
        store_config: StoreConfig,
        fetch_source: Callable[[str, str | None], bytes],
        on_stored: Callable[[int], None] = lambda nbytes: None,
        warm_up_tokens: int = 0,
    ):
        """``on_stored(nbytes)``: told of each translation this engine stores (a metric);
        ``warm_up_tokens``: ``warm_up`` also runs the translators' shapes of contexts up to this size."""
        self.source, self.targets, self.translators = source, targets, translators
        self.store, self.store_config, self.fetch_source = store, store_config, fetch_source
        self.on_stored, self.warm_up_tokens = on_stored, warm_up_tokens
        self._locks = KeyedLocks()

    def warm_up(self) -> float:
        """Seconds to run every translator once on a short text (on a zero source cache), and at
        the shapes of contexts up to ``warm_up_tokens`` (``CacheTranslator.warm_up_shapes``),
        writing nothing: the first request should not pay for first calls (serving weights laid
        out, allocator pages, kernels built for a new shape)."""
        started = time.perf_counter()
        source_ids = self.source.tokenizer(WARM_UP_TEXT, return_tensors="pt")["input_ids"]
        for name, translator in self.translators.items():
            zeros = _zero_cache(self.source.spec, source_ids, translator.card.source_fingerprint)
            self._run(translator, self.targets[name], zeros, WARM_UP_TEXT)
            if counts := translator.warm_up_shapes(self.warm_up_tokens):
                log.info("translator to %s ran %d row counts, contexts to %d tokens", name, counts, self.warm_up_tokens)
        return time.perf_counter() - started

    def _run(
        self, translator: CacheTranslator, target: ModelMeta, source_cache: KVCache, text: str
    ) -> TranslationResult:
        """``translator.translate`` with the source's and ``target``'s tokenizers and facts."""
        return translator.translate(
            source_cache,
            text,
            source_spec=self.source.spec,
            source_tokenizer=self.source.tokenizer,
            target_spec=target.spec,
            target_tokenizer=target.tokenizer,
            target_first_layer=target.first_layer,
        )

    def _source_cache(self, ctx: str, text: str, fingerprint: str, laps: Laps) -> KVCache:
        """Straight from the store when it is there (no hop through the source deployment with the
        whole blob); otherwise, or when the stored blob is bad, re-made by ``fetch_source``."""
        key = source_key(ctx, fingerprint)
        with laps("fetch"):
            blob = self.store.get(key)
        with laps("decode"):
            cache = decode_or_drop(self.store, key, blob, fingerprint)
        if cache is None:
            with laps("via source"):
                blob = self.fetch_source(ctx, text)
            with laps("decode"):
                cache = codec.decode(blob, expected_fingerprint=fingerprint, dtype=torch.float32)
        return cache

    def translate(
        self, ctx: str, target: str, known_text: str | None = None, deadline: Deadline = NO_DEADLINE
    ) -> tuple[bytes, float]:
        """The encoded translated cache and the seconds spent translating (0.0: it was stored)."""
        translator = self.translators.get(target)
        if translator is None:
            raise FailedPreconditionError(f"no translator from {self.source.name} to {target}")
        card = translator.card
        # stored only where it is what requests read: at an operating point the target recomputes
        # part of it and stores that blend, and storing the translation too would double what each
        # (context, target) holds in Redis and put a whole cache's write on every fresh request's path
        keep = card.operating_point is None
        key = translated_key(ctx, card.source_fingerprint, card.target_fingerprint, card.version)
        with self._locks.hold(key, deadline, "translation"):
            existing = self.store.get(key) if keep else None
            if decode_or_drop(self.store, key, existing, card.target_fingerprint) is not None:
                return existing, 0.0
            laps = Laps()
            with laps("fetch"):
                text = read_context_text(self.store, ctx, known_text)
            source_cache = self._source_cache(ctx, text, card.source_fingerprint, laps)
            target = self.targets[target]
            with laps("translate"):
                result = self._run(translator, target, source_cache, text)
            with laps("encode+store" if keep else "encode"):
                blob = codec.encode(result.cache, self.store_config.storage_dtype)
                if keep:
                    self.store.put(key, blob)
                    self.on_stored(len(blob))
            log.info(
                "translated %s for %s in %.3f s (%s; %d bytes%s)",
                ctx[:12],
                target.name,
                laps.total,
                laps,
                len(blob),
                "" if keep else ", for the target to blend",
            )
            return blob, laps.total


@dataclass
class ObtainedCache:
    model_cache: object | None  # the model's own cache object, or None (no context)
    native_ids: torch.Tensor  # context tokens the target still runs itself [1, n]
    context_tokens: int
    source: str
    cache_s: float
    translator_version: str = ""


@dataclass
class GenerationFacts:
    cache_source: str = ""
    ttft_ms: float = 0.0
    cache_ms: float = 0.0
    total_ms: float = 0.0
    context_tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finish_reason: str = ""
    translator_version: str = ""


class TargetEngine:
    def __init__(
        self,
        spec: TargetSpec | str,
        model: LoadedModel | None,
        store: CacheStore,
        limits: Limits,
        translate: Callable[[str, str, str | None, float | None], tuple[bytes, float]] | None,
        translator_card: TranslatorCard | None = None,
        storage_dtype: str = "bfloat16",
        on_stored: Callable[[int], None] = lambda nbytes: None,
    ):
        """``on_stored(nbytes)``: told of each blended cache this engine stores (a metric)."""
        self.name = spec.name if isinstance(spec, TargetSpec) else spec
        self.lm = model if model is not None else load_model(self.name)
        self.store, self.limits, self.storage_dtype = store, limits, storage_dtype
        self.translate_fn, self.card, self.on_stored = translate, translator_card, on_stored
        self.translator_version = translator_card.version if translator_card is not None else ""
        # the translator's operating point: what of the context is recomputed here (recompute.blend)
        self.point = translator_card.operating_point if translator_card is not None else None
        self.translator_name = (spec.translator if isinstance(spec, TargetSpec) else None) or ""
        self._locks = KeyedLocks()

    def info(self) -> dict:
        info = model_info(self.lm, "target")
        # the checkpoint serving source -> this target (mot.proto ModelInfo.translator), "" if none
        info["translator"] = (self.translator_name or "yes") if self.translate_fn is not None else ""
        info["translator_version"] = self.translator_version
        return info

    def _context_ids(self, text: str) -> torch.Tensor:
        return self.lm.tokenizer(text, return_tensors="pt")["input_ids"]

    def warm_up(self) -> float:
        """Seconds to run a request's paths once on a short text, writing nothing: native prefill,
        the recompute at the translator's operating point (on a zero cache) or the native head, and
        two generated tokens. The first request should not pay for first calls (allocator pages,
        kernel set-up, the BOS head's cache): they cost it 0.2-0.9 s more on a 2-core CPU."""
        started = time.perf_counter()
        ids = self._context_ids(WARM_UP_TEXT)
        context, suffix = ids[:, :-1], ids[:, -1:]
        cache, _ = prefill(self.lm, context)
        if self.point is not None:  # a recompute reads every position in every layer
            cache = _zero_cache(self.lm.spec, context, self.lm.fingerprint.id)
        cache = trim_to_windows(with_native_rows(self.lm, cache, self.point), self.lm.spec)
        for _ in stream_generate(self.lm, to_model_cache(self.lm, cache), suffix, Sampling(max_new_tokens=2)):
            pass
        return time.perf_counter() - started

    def _decode_translated(self, blob: bytes, ids: torch.Tensor) -> KVCache:
        cache = codec.decode(blob, expected_fingerprint=self.lm.fingerprint.id, dtype=torch.float32)
        if not torch.equal(cache.token_ids[0], ids[0, : cache.seq_len]):
            raise FailedPreconditionError("translated cache does not match this target's tokenisation of the context")
        return cache

    def translated_cache(
        self, ctx: str, text: str, ids: torch.Tensor, deadline: Deadline = NO_DEADLINE
    ) -> tuple[KVCache, bytes, bool]:
        """The translated cache as this model uses it, its stored blob, and whether it was made now.

        Position 0 (BOS / attention sink) is always the target's own. At the translator's operating
        point the target also recomputes that share of the context over the translation (the last
        tokens of the context and the words the source found most surprising), once: the blended
        cache is stored under its own key (translator version + selection + fraction + recent and attended shares).
        """
        deadline.check("translation")
        if self.point is None:
            blob, translate_s = self.translate_fn(ctx, self.name, text, deadline.remaining())
            return with_native_rows(self.lm, self._decode_translated(blob, ids), None), blob, translate_s > 0
        card, point = self.card, self.point
        version = f"{card.version}+{point.label}"
        key = translated_key(ctx, card.source_fingerprint, card.target_fingerprint, version)
        with self._locks.hold(key, deadline, "recompute"):
            stored = self.store.get(key)
            cache = decode_or_drop(self.store, key, stored, self.lm.fingerprint.id)
            if cache is not None and torch.equal(cache.token_ids[0], ids[0, : cache.seq_len]):
                return cache, stored, False
            blob, _ = self.translate_fn(ctx, self.name, text, deadline.remaining())
            translated = self._decode_translated(blob, ids)
            deadline.check("recompute")
            laps = Laps()
            with laps("recompute"):
                blended = with_native_rows(self.lm, translated, point)
            with laps("encode+store"):
                blob = codec.encode(trim_to_windows(blended, self.lm.spec), self.storage_dtype)
                self.store.put(key, blob)
            self.on_stored(len(blob))
            with laps("decode"):
                cache = codec.decode(blob, expected_fingerprint=self.lm.fingerprint.id, dtype=torch.float32)  # = a hit
            attended = f"{100 * point.attended:.0f}% that the source saw its end read, " if point.attended else ""
            log.info(
                "recomputed %.0f%% of %s natively (its last %.0f%%, %sthe rest by %s) in %.3f s (%s)",
                100 * point.fraction,
                ctx[:12],
                100 * point.recent,
                attended,
                point.selection,
                laps.total,
                laps,
            )
            return cache, blob, True

    def obtain(
        self, ctx: str, mode: str, known_text: str | None = None, deadline: Deadline = NO_DEADLINE
    ) -> ObtainedCache:
        started = time.perf_counter()
        if mode == NONE:
            bos = [self.lm.spec.bos_token_id] if self.lm.spec.prepend_bos else []
            return ObtainedCache(None, torch.tensor([bos], dtype=torch.long), 0, NO_CONTEXT, 0.0)
        text = read_context_text(self.store, ctx, known_text)
        ids = self._context_ids(text)
        if mode in (AUTO, TRANSLATE) and self.translate_fn is not None:
            cache, _, fresh = self.translated_cache(ctx, text, ids, deadline)
            source = TRANSLATED_FRESH if fresh else TRANSLATED_HIT
            return ObtainedCache(
                to_model_cache(self.lm, cache),
                ids[:, cache.seq_len :],
                ids.shape[-1],
                source,
                time.perf_counter() - started,
                self.translator_version,
            )
        if mode == TRANSLATE:
            raise FailedPreconditionError(f"no translator serves target {self.name}; use mode AUTO or NATIVE")
        deadline.check("native prefill")
        cache, _ = prefill(self.lm, ids[:, :-1])
        return ObtainedCache(
            to_model_cache(self.lm, cache), ids[:, -1:], ids.shape[-1], NATIVE_PREFILL, time.perf_counter() - started
        )

    def _prompt_ids(self, prompt: str) -> torch.Tensor:
        if len(prompt) > self.limits.max_prompt_chars:
            raise InvalidArgumentError(
                f"prompt has {len(prompt)} characters; the limit is {self.limits.max_prompt_chars}"
            )
        return self.lm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]

    def generate(
        self,
        ctx: str,
        prompt: str,
        mode: str,
        sampling: Sampling,
        known_text: str | None = None,
        deadline: Deadline = NO_DEADLINE,
    ) -> Iterator[str | GenerationFacts]:
        """Yields text pieces, then one ``GenerationFacts``."""
        started = time.perf_counter()
        if sampling.max_new_tokens > self.limits.max_new_tokens:
            raise InvalidArgumentError(f"max_new_tokens {sampling.max_new_tokens} exceeds {self.limits.max_new_tokens}")
        prompt_ids = self._prompt_ids(prompt)
        obtained = self.obtain(ctx, mode, known_text, deadline)
        suffix = torch.cat((obtained.native_ids, prompt_ids), dim=-1)
        if suffix.shape[-1] == 0:
            raise InvalidArgumentError("prompt is empty and no context token is left to generate from")
        facts = GenerationFacts(
            cache_source=obtained.source,
            cache_ms=obtained.cache_s * 1000,
            context_tokens=obtained.context_tokens,
            prompt_tokens=prompt_ids.shape[-1],
            translator_version=obtained.translator_version,
        )
        state = StreamState()
        for piece in stream_generate(self.lm, obtained.model_cache, suffix, sampling, state):
            deadline.check("the next token")
            if not facts.ttft_ms:
                facts.ttft_ms = (time.perf_counter() - started) * 1000
            yield piece
        facts.generated_tokens, facts.finish_reason = state.generated_tokens, state.finish_reason
        facts.total_ms = (time.perf_counter() - started) * 1000
        if not facts.ttft_ms:
            facts.ttft_ms = facts.total_ms
        yield facts

    def score(
        self,
        ctx: str,
        prompt: str,
        continuation: str,
        mode: str,
        known_text: str | None = None,
        deadline: Deadline = NO_DEADLINE,
    ) -> dict:
        if not continuation:
            raise InvalidArgumentError("continuation is empty")
        prompt_ids = self._prompt_ids(prompt)
        cont_ids = self._prompt_ids(continuation)
        obtained = self.obtain(ctx, mode, known_text, deadline)
        deadline.check("scoring")
        prefix = torch.cat((obtained.native_ids, prompt_ids), dim=-1)
        if prefix.shape[-1] == 0:  # no BOS, no context, no prompt: the first token cannot be scored
            prefix, cont_ids = cont_ids[:, :1], cont_ids[:, 1:]
        logprobs = score_continuation(self.lm, obtained.model_cache, prefix, cont_ids)
        tokens = [
            {"token_id": int(t), "text": self.lm.tokenizer.decode([int(t)]), "logprob": float(lp)}
            for t, lp in zip(cont_ids[0], logprobs, strict=True)
        ]
        return {"tokens": tokens, "total_logprob": float(logprobs.sum()), "cache_source": obtained.source}

    def get_cache(self, ctx: str, known_text: str | None = None, deadline: Deadline = NO_DEADLINE) -> tuple[bytes, str]:
        if self.translate_fn is None:
            raise FailedPreconditionError(f"no translator serves target {self.name}")
        text = read_context_text(self.store, ctx, known_text)
        _, blob, fresh = self.translated_cache(ctx, text, self._context_ids(text), deadline)
        return blob, TRANSLATED_FRESH if fresh else TRANSLATED_HIT


def load_translators(config: ServiceConfig) -> dict[str, CacheTranslator]:
    """Each target's translator by target name (targets without one are served natively)."""
    return {t.name: load_translator(resolve_translator_path(t.translator)) for t in config.targets if t.translator}


def read_translator_card(name: str) -> TranslatorCard:
    """A translator's card alone (fingerprints, version) without loading its weights."""
    path = resolve_translator_path(name) / CARD_FILE
    if not path.is_file():
        raise InvalidArgumentError(f"{path.parent} is not a translator checkpoint (no {CARD_FILE})")
    return TranslatorCard(**json.loads(path.read_text()))
