"""Python client for the MoT Cache Service (``mot.v1.MotCache`` over gRPC): sync and asyncio.

>>> with MotClient("localhost:9000") as mot:
...     ctx = mot.put_context(documents=["Doc one ...", "Doc two ..."])
...     for piece in mot.generate_stream(ctx.context_id, "qwen2.5-0.5b", prompt="\\nQ: ...\\nA:"):
...         print(piece, end="")
...     result = mot.generate(ctx.context_id, "gemma3-270m", prompt="\\nQ: ...\\nA:")
...     result.text, result.facts.cache_source, result.facts.ttft_ms

``AsyncMotClient`` has the same methods as coroutines (``generate_stream`` is an async iterator).

Every call carries the ``application`` metadata Ray Serve's gRPC proxy routes by, and the
bearer token (``authorization: Bearer <token>``) when one is given or set in ``MOT_API_TOKEN``.
Each call has a deadline (``timeout`` seconds, per call or the client's default). A call that
fails with UNAVAILABLE (the service restarting, its cache store down) is retried with bounded,
jittered exponential backoff (:class:`RetryPolicy`): unary calls through gRPC's own retry
machinery (the channel's service config ``retryPolicy``) while the service has not answered, and
by the client for UNAVAILABLE replies (Ray Serve's proxy sends them in a way gRPC never
retries, see ``_should_retry_unary``); ``Generate`` only while no message has arrived yet (text
already handed to the caller is never repeated); ``GetCache`` from the start, as its chunks are
only returned once all of them arrived. The deadline bounds a call with all its retries.
Failures raise :class:`MotClientError` with the gRPC status code and the service's details.

The client needs only ``grpcio`` and the generated ``mot.v1`` stubs (no Ray, no torch).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio

from mot.v1 import mot_pb2, mot_pb2_grpc
from services.deadline import TIMEOUT_METADATA

__all__ = [
    "AsyncGenerationStream",
    "AsyncMotClient",
    "CacheBlob",
    "GenerationFacts",
    "GenerationResult",
    "GenerationStream",
    "ModelInfo",
    "MotClient",
    "MotClientError",
    "PutResult",
    "RetryPolicy",
    "ScoreResult",
    "Stats",
    "TokenScore",
]

DEFAULT_APPLICATION = "mot"  # services.app.APP_NAME (not imported from there: that module needs Ray)
TOKEN_ENV = "MOT_API_TOKEN"
SERVICE_NAME = "mot.v1.MotCache"
UNARY_METHODS = ("PutContext", "Score", "DeleteContext", "ListModels", "Stats")
MODES = ("AUTO", "TRANSLATE", "NATIVE", "NONE")


# ---------------------------------------------------------------------------------------------- errors


class MotClientError(Exception):
    """A failed call: ``code`` is the ``grpc.StatusCode``, ``details`` the service's one-line message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc_error(cls, exc: grpc.RpcError) -> MotClientError:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")


# ---------------------------------------------------------------------------------------------- results


def _source_name(value: int) -> str:
    return mot_pb2.CacheSource.Name(value).removeprefix("CACHE_SOURCE_")


@dataclass(frozen=True)
class PutResult:
    context_id: str
    token_count: int
    stored_bytes: int
    already_cached: bool
    source_model: str
    source_fingerprint: str

    @classmethod
    def from_proto(cls, m: mot_pb2.PutContextResponse) -> PutResult:
        return cls(m.context_id, m.token_count, m.stored_bytes, m.already_cached, m.source_model, m.source_fingerprint)


@dataclass(frozen=True)
class GenerationFacts:
    cache_source: str  # "TRANSLATED_HIT" | "TRANSLATED_FRESH" | "NATIVE_PREFILL" | "NONE"
    ttft_ms: float
    cache_ms: float
    total_ms: float
    context_tokens: int
    prompt_tokens: int
    generated_tokens: int
    finish_reason: str  # "length" | "stop" | "eos"
    translator_version: str

    @classmethod
    def from_proto(cls, m: mot_pb2.GenerationFacts) -> GenerationFacts:
        return cls(
            _source_name(m.cache_source),
            m.ttft_ms,
            m.cache_ms,
            m.total_ms,
            m.context_tokens,
            m.prompt_tokens,
            m.generated_tokens,
            m.finish_reason,
            m.translator_version,
        )


@dataclass(frozen=True)
class GenerationResult:
    text: str
    facts: GenerationFacts

    @property
    def cache_source(self) -> str:
        return self.facts.cache_source

    @property
    def ttft_ms(self) -> float:
        return self.facts.ttft_ms


@dataclass(frozen=True)
class TokenScore:
    token_id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class ScoreResult:
    tokens: tuple[TokenScore, ...]
    total_logprob: float
    cache_source: str

    @property
    def logprobs(self) -> list[float]:
        return [t.logprob for t in self.tokens]

    @classmethod
    def from_proto(cls, m: mot_pb2.ScoreResponse) -> ScoreResult:
        tokens = tuple(TokenScore(t.token_id, t.text, t.logprob) for t in m.tokens)
        return cls(tokens, m.total_logprob, _source_name(m.cache_source))


@dataclass(frozen=True)
class CacheBlob:
    """An encoded cache (``mot_core.codec`` format) of a context, in a target model's space."""

    data: bytes
    target_fingerprint: str
    cache_source: str


@dataclass(frozen=True)
class ModelInfo:
    name: str
    role: str  # "source" | "target"
    model_type: str
    fingerprint: str
    num_layers: int
    translator: str  # "" if the target has no translator (it prefills natively)
    translator_version: str

    @property
    def has_translator(self) -> bool:
        return bool(self.translator)

    @classmethod
    def from_proto(cls, m: mot_pb2.ModelInfo) -> ModelInfo:
        return cls(m.name, m.role, m.model_type, m.fingerprint, m.num_layers, m.translator, m.translator_version)


@dataclass(frozen=True)
class Stats:
    store_entries: int
    store_bytes: int
    store_budget_bytes: int
    counters: dict[str, int] = field(default_factory=dict)
    store_available: bool = True

    @classmethod
    def from_proto(cls, m: mot_pb2.StatsResponse) -> Stats:
        return cls(m.store_entries, m.store_bytes, m.store_budget_bytes, dict(m.counters), m.store_available)


# ---------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class RetryPolicy:
    """Retries on UNAVAILABLE: up to ``max_attempts`` calls in all (1: no retry; gRPC caps it at 5).

    Retry n (0-based) waits up to ``min(initial_backoff * multiplier**n, max_backoff)`` seconds:
    a random time below that for unary calls (gRPC's retryPolicy), at least half of it for the
    streams the client retries itself. The call's deadline bounds the whole, retries included.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 5:
            raise ValueError("max_attempts must be in 1..5 (gRPC's limit)")
        if self.initial_backoff <= 0 or self.max_backoff < self.initial_backoff or self.multiplier < 1:
            raise ValueError("need 0 < initial_backoff <= max_backoff and multiplier >= 1")

    def service_config(self) -> str:
        """The channel's ``grpc.service_config`` (JSON) with this retry policy for the unary methods."""
        method_config: dict = {"name": [{"service": SERVICE_NAME, "method": m} for m in UNARY_METHODS]}
        if self.max_attempts > 1:
            method_config["retryPolicy"] = {
                "maxAttempts": self.max_attempts,
                "initialBackoff": f"{self.initial_backoff:.3f}s",
                "maxBackoff": f"{self.max_backoff:.3f}s",
                "backoffMultiplier": self.multiplier,
                "retryableStatusCodes": ["UNAVAILABLE"],
            }
        return json.dumps({"methodConfig": [method_config]})

    def backoff(self, retry: int) -> float:
        """Seconds to wait before stream retry number ``retry`` (0-based): half fixed, half random."""
        cap = min(self.initial_backoff * self.multiplier**retry, self.max_backoff)
        return cap / 2 + random.uniform(0, cap / 2)


def _mode(mode: str | int) -> int:
    if isinstance(mode, int):
        mot_pb2.CacheMode.Name(mode)  # ValueError if unknown
        return mode
    name = mode.upper().removeprefix("CACHE_MODE_")
    if name not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mot_pb2.CacheMode.Value(f"CACHE_MODE_{name}")


def _put_request(text: str | None, documents: Sequence[str] | None) -> mot_pb2.PutContextRequest:
    if (text is None) == (documents is None):
        raise ValueError("give exactly one of text or documents")
    if documents is not None:
        if isinstance(documents, str):
            raise TypeError("documents must be a sequence of strings, not one string (use text=)")
        return mot_pb2.PutContextRequest(documents=mot_pb2.Documents(documents=list(documents)))
    return mot_pb2.PutContextRequest(text=text)


def _generate_request(
    context_id: str,
    target_model: str,
    prompt: str,
    mode: str | int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    seed: int | None,
    stop: Sequence[str],
) -> mot_pb2.GenerateRequest:
    sampling = mot_pb2.SamplingOptions(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, stop=list(stop)
    )
    if seed is not None:
        sampling.seed = seed
    return mot_pb2.GenerateRequest(
        context_id=context_id, target_model=target_model, prompt=prompt, mode=_mode(mode), sampling=sampling
    )


def _score_request(
    context_id: str, target_model: str, continuation: str, prompt: str, mode: str | int
) -> mot_pb2.ScoreRequest:
    return mot_pb2.ScoreRequest(
        context_id=context_id, target_model=target_model, prompt=prompt, continuation=continuation, mode=_mode(mode)
    )


class _CacheAssembler:
    """Joins GetCache chunks, checking their order, count and the announced total size."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.first: mot_pb2.CacheChunk | None = None

    def add(self, chunk: mot_pb2.CacheChunk) -> None:
        if self.first is None:
            self.first = chunk
        elif (chunk.total, chunk.total_bytes) != (self.first.total, self.first.total_bytes):
            raise MotClientError(grpc.StatusCode.DATA_LOSS, "GetCache chunks disagree on the total size")
        if chunk.index != len(self.parts):
            raise MotClientError(
                grpc.StatusCode.DATA_LOSS, f"GetCache chunk {chunk.index} arrived, expected {len(self.parts)}"
            )
        self.parts.append(chunk.data)

    def result(self) -> CacheBlob:
        first = self.first
        if first is None:
            raise MotClientError(grpc.StatusCode.DATA_LOSS, "GetCache returned no chunk")
        data = b"".join(self.parts)
        if len(self.parts) != first.total or len(data) != first.total_bytes:
            raise MotClientError(
                grpc.StatusCode.DATA_LOSS,
                f"GetCache returned {len(self.parts)}/{first.total} chunks, {len(data)}/{first.total_bytes} bytes",
            )
        return CacheBlob(data, first.target_fingerprint, _source_name(first.cache_source))


class _Base:
    _channels = grpc  # module that makes channels: grpc (blocking) or grpc.aio

    def __init__(
        self,
        address: str = "localhost:9000",
        *,
        token: str | None = None,
        application: str = DEFAULT_APPLICATION,
        timeout: float | None = 60.0,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, object]] = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        token = os.environ.get(TOKEN_ENV, "") if token is None else token
        metadata = [("application", application)]
        if token:
            metadata.append(("authorization", f"Bearer {token}"))
        self._metadata = tuple(metadata)
        self._options = [
            ("grpc.enable_retries", 1 if self.retry.max_attempts > 1 else 0),
            ("grpc.service_config", self.retry.service_config()),
            ("grpc.max_receive_message_length", 64 << 20),
            *options,
        ]
        if credentials is None:
            self._channel = self._channels.insecure_channel(address, options=self._options)
        else:
            self._channel = self._channels.secure_channel(address, credentials, options=self._options)
        self._stub = mot_pb2_grpc.MotCacheStub(self._channel)

    def _deadline(self, timeout: float | None) -> float | None:
        timeout = self.timeout if timeout is None else timeout
        return None if timeout is None else time.monotonic() + timeout

    @staticmethod
    def _remaining(deadline: float | None) -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise MotClientError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the call")
        return left

    def _call_options(self, deadline: float | None) -> dict:
        """Metadata and timeout of one attempt. The time left also travels as ``mot-timeout-ms``
        metadata: Ray Serve's proxy does not forward gRPC deadlines, so the service reads its budget
        from there and stops work nobody waits for (DEADLINE_EXCEEDED)."""
        left = self._remaining(deadline)
        metadata = self._metadata if left is None else (*self._metadata, (TIMEOUT_METADATA, str(int(left * 1000))))
        return {"metadata": metadata, "timeout": left}

    def _should_retry(self, exc: grpc.RpcError, attempt: int, deadline: float | None) -> float | None:
        """Seconds to wait before retrying a failed attempt (UNAVAILABLE, attempts and time left), or None."""
        if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt + 1 >= self.retry.max_attempts:
            return None
        wait = self.retry.backoff(attempt)
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        return wait

    def _should_retry_unary(self, exc: grpc.RpcError, attempt: int, deadline: float | None) -> float | None:
        """Like ``_should_retry``, for the UNAVAILABLE replies gRPC's retryPolicy does not retry.

        gRPC retries a call only until the server has sent a response (the call is then
        "committed"): that covers a proxy that is down or restarting. Ray Serve's gRPC proxy sends
        every application error, UNAVAILABLE from a down cache store included, after an (empty)
        response message, so gRPC never retries those: the client does, with the same policy.
        A call that never reaches the service can thus take up to ``max_attempts`` client
        attempts of up to ``max_attempts`` gRPC attempts each; the deadline bounds it all.
        """
        return self._should_retry(exc, attempt, deadline)


# ---------------------------------------------------------------------------------------------- sync


class GenerationStream:
    """Iterate for the generated text pieces; afterwards ``result`` holds the whole ``GenerationResult``.

    Closing it early (``close()``, leaving a ``with`` block, or garbage collection) cancels the call.
    """

    def __init__(self, client: MotClient, request: mot_pb2.GenerateRequest, deadline: float | None) -> None:
        self._client, self._request, self._deadline = client, request, deadline
        self._call = None
        self.result: GenerationResult | None = None
        self._pieces = self._run()

    def _run(self) -> Iterator[str]:
        client, pieces, facts, attempt = self._client, [], None, 0
        while True:
            received = False
            self._call = client._stub.Generate(self._request, **client._call_options(self._deadline))
            try:
                for message in self._call:
                    received = True
                    if message.HasField("facts"):
                        facts = GenerationFacts.from_proto(message.facts)
                    if message.text:
                        pieces.append(message.text)
                        yield message.text
                break
            except grpc.RpcError as exc:
                wait = None if received else client._should_retry(exc, attempt, self._deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                time.sleep(wait)
                attempt += 1
        if facts is None:
            raise MotClientError(grpc.StatusCode.INTERNAL, "the Generate stream ended without its final facts")
        self.result = GenerationResult("".join(pieces), facts)

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> str:
        return next(self._pieces)

    def close(self) -> None:
        if self._call is not None and self.result is None:
            self._call.cancel()
        self._pieces.close()

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at collection time
            pass


class MotClient(_Base):
    """Blocking client. ``address``: ``host:port`` of the service's gRPC proxy.

    ``token``: bearer token (default: ``$MOT_API_TOKEN``; ``""``: send none). ``timeout``: default
    per-call deadline in seconds (None: no deadline). ``retry``: UNAVAILABLE retry policy
    (``RetryPolicy(max_attempts=1)`` disables retries). ``credentials``: TLS channel credentials
    (default: plaintext, for loopback or a cluster-internal network).
    """

    def _unary(self, method, request, timeout: float | None):
        deadline, attempt = self._deadline(timeout), 0
        while True:
            try:
                return method(request, **self._call_options(deadline))
            except grpc.RpcError as exc:
                wait = self._should_retry_unary(exc, attempt, deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                time.sleep(wait)
                attempt += 1

    def put_context(
        self, text: str | None = None, *, documents: Sequence[str] | None = None, timeout: float | None = None
    ) -> PutResult:
        """Store a context (text, or documents joined with a blank line); the source model prefills it once."""
        return PutResult.from_proto(self._unary(self._stub.PutContext, _put_request(text, documents), timeout))

    def generate_stream(
        self,
        context_id: str,
        target_model: str,
        prompt: str = "",
        *,
        mode: str | int = "AUTO",
        max_new_tokens: int = 0,
        temperature: float = 0.0,
        top_p: float = 0.0,
        top_k: int = 0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        timeout: float | None = None,
    ) -> GenerationStream:
        """Generated text pieces as they come (an iterator); its ``result`` is set once exhausted.
        ``max_new_tokens`` 0 and ``temperature`` 0: the server default length, greedy decoding."""
        request = _generate_request(
            context_id, target_model, prompt, mode, max_new_tokens, temperature, top_p, top_k, seed, stop
        )
        return GenerationStream(self, request, self._deadline(timeout))

    def generate(self, context_id: str, target_model: str, prompt: str = "", **kwargs) -> GenerationResult:
        """The whole generation and its facts (cache source, TTFT, ...); arguments as ``generate_stream``."""
        with self.generate_stream(context_id, target_model, prompt, **kwargs) as stream:
            for _ in stream:
                pass
            assert stream.result is not None
            return stream.result

    def score(
        self,
        context_id: str,
        target_model: str,
        continuation: str,
        *,
        prompt: str = "",
        mode: str | int = "AUTO",
        timeout: float | None = None,
    ) -> ScoreResult:
        """Per-token log-probabilities of ``continuation`` after the context (and ``prompt``)."""
        request = _score_request(context_id, target_model, continuation, prompt, mode)
        return ScoreResult.from_proto(self._unary(self._stub.Score, request, timeout))

    def get_cache_blob(self, context_id: str, target_model: str, *, timeout: float | None = None) -> CacheBlob:
        """The translated cache of a context for a target, joined and size-checked, with its fingerprint."""
        request = mot_pb2.GetCacheRequest(context_id=context_id, target_model=target_model)
        deadline, attempt = self._deadline(timeout), 0
        while True:
            assembler = _CacheAssembler()
            try:
                for chunk in self._stub.GetCache(request, **self._call_options(deadline)):
                    assembler.add(chunk)
                return assembler.result()
            except grpc.RpcError as exc:  # nothing was handed out yet: retrying from the start is safe
                wait = self._should_retry(exc, attempt, deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                time.sleep(wait)
                attempt += 1

    def get_cache(self, context_id: str, target_model: str, *, timeout: float | None = None) -> bytes:
        """The encoded translated cache (``mot_core.codec.decode`` reads it) of a context for a target."""
        return self.get_cache_blob(context_id, target_model, timeout=timeout).data

    def delete_context(self, context_id: str, *, timeout: float | None = None) -> int:
        """Remove every cache of a context; returns how many entries went (NOT_FOUND if none)."""
        request = mot_pb2.DeleteContextRequest(context_id=context_id)
        return self._unary(self._stub.DeleteContext, request, timeout).deleted_entries

    def list_models(self, *, timeout: float | None = None) -> list[ModelInfo]:
        reply = self._unary(self._stub.ListModels, mot_pb2.ListModelsRequest(), timeout)
        return [ModelInfo.from_proto(m) for m in reply.models]

    def stats(self, *, timeout: float | None = None) -> Stats:
        return Stats.from_proto(self._unary(self._stub.Stats, mot_pb2.StatsRequest(), timeout))

    def wait_ready(self, timeout: float = 60.0, poll: float = 0.5) -> list[ModelInfo]:
        """Poll ListModels until the service answers (e.g. right after it started); returns the models."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.list_models(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            except MotClientError as exc:
                if exc.code == grpc.StatusCode.UNAUTHENTICATED or time.monotonic() + poll >= deadline:
                    raise
                time.sleep(poll)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> MotClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- asyncio


class AsyncGenerationStream:
    """``async for piece in stream``; afterwards ``result`` holds the whole ``GenerationResult``."""

    def __init__(self, client: AsyncMotClient, request: mot_pb2.GenerateRequest, deadline: float | None) -> None:
        self._client, self._request, self._deadline = client, request, deadline
        self._call = None
        self.result: GenerationResult | None = None
        self._pieces = self._run()

    async def _run(self) -> AsyncIterator[str]:
        client, pieces, facts, attempt = self._client, [], None, 0
        while True:
            received = False
            self._call = client._stub.Generate(self._request, **client._call_options(self._deadline))
            try:
                async for message in self._call:
                    received = True
                    if message.HasField("facts"):
                        facts = GenerationFacts.from_proto(message.facts)
                    if message.text:
                        pieces.append(message.text)
                        yield message.text
                break
            except grpc.RpcError as exc:
                wait = None if received else client._should_retry(exc, attempt, self._deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                await asyncio.sleep(wait)
                attempt += 1
        if facts is None:
            raise MotClientError(grpc.StatusCode.INTERNAL, "the Generate stream ended without its final facts")
        self.result = GenerationResult("".join(pieces), facts)

    def __aiter__(self) -> AsyncGenerationStream:
        return self

    async def __anext__(self) -> str:
        return await self._pieces.__anext__()

    async def aclose(self) -> None:
        if self._call is not None and self.result is None:
            self._call.cancel()
        await self._pieces.aclose()

    async def __aenter__(self) -> AsyncGenerationStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncMotClient(_Base):
    """The asyncio client (``grpc.aio``); same arguments and methods as :class:`MotClient`, awaited.

    Create it inside the running event loop; ``async with AsyncMotClient(...) as mot: ...``.
    """

    _channels = grpc.aio

    async def _unary(self, method, request, timeout: float | None):
        deadline, attempt = self._deadline(timeout), 0
        while True:
            try:
                return await method(request, **self._call_options(deadline))
            except grpc.RpcError as exc:
                wait = self._should_retry_unary(exc, attempt, deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                await asyncio.sleep(wait)
                attempt += 1

    async def put_context(
        self, text: str | None = None, *, documents: Sequence[str] | None = None, timeout: float | None = None
    ) -> PutResult:
        return PutResult.from_proto(await self._unary(self._stub.PutContext, _put_request(text, documents), timeout))

    def generate_stream(
        self,
        context_id: str,
        target_model: str,
        prompt: str = "",
        *,
        mode: str | int = "AUTO",
        max_new_tokens: int = 0,
        temperature: float = 0.0,
        top_p: float = 0.0,
        top_k: int = 0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncGenerationStream:
        request = _generate_request(
            context_id, target_model, prompt, mode, max_new_tokens, temperature, top_p, top_k, seed, stop
        )
        return AsyncGenerationStream(self, request, self._deadline(timeout))

    async def generate(self, context_id: str, target_model: str, prompt: str = "", **kwargs) -> GenerationResult:
        async with self.generate_stream(context_id, target_model, prompt, **kwargs) as stream:
            async for _ in stream:
                pass
            assert stream.result is not None
            return stream.result

    async def score(
        self,
        context_id: str,
        target_model: str,
        continuation: str,
        *,
        prompt: str = "",
        mode: str | int = "AUTO",
        timeout: float | None = None,
    ) -> ScoreResult:
        request = _score_request(context_id, target_model, continuation, prompt, mode)
        return ScoreResult.from_proto(await self._unary(self._stub.Score, request, timeout))

    async def get_cache_blob(self, context_id: str, target_model: str, *, timeout: float | None = None) -> CacheBlob:
        request = mot_pb2.GetCacheRequest(context_id=context_id, target_model=target_model)
        deadline, attempt = self._deadline(timeout), 0
        while True:
            assembler = _CacheAssembler()
            try:
                call = self._stub.GetCache(request, **self._call_options(deadline))
                async for chunk in call:
                    assembler.add(chunk)
                return assembler.result()
            except grpc.RpcError as exc:
                wait = self._should_retry(exc, attempt, deadline)
                if wait is None:
                    raise MotClientError.from_rpc_error(exc) from None
                await asyncio.sleep(wait)
                attempt += 1

    async def get_cache(self, context_id: str, target_model: str, *, timeout: float | None = None) -> bytes:
        return (await self.get_cache_blob(context_id, target_model, timeout=timeout)).data

    async def delete_context(self, context_id: str, *, timeout: float | None = None) -> int:
        request = mot_pb2.DeleteContextRequest(context_id=context_id)
        return (await self._unary(self._stub.DeleteContext, request, timeout)).deleted_entries

    async def list_models(self, *, timeout: float | None = None) -> list[ModelInfo]:
        reply = await self._unary(self._stub.ListModels, mot_pb2.ListModelsRequest(), timeout)
        return [ModelInfo.from_proto(m) for m in reply.models]

    async def stats(self, *, timeout: float | None = None) -> Stats:
        return Stats.from_proto(await self._unary(self._stub.Stats, mot_pb2.StatsRequest(), timeout))

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncMotClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
