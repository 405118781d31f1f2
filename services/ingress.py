"""The gRPC ingress (mot.v1.MotCache) behind Ray Serve's gRPC proxy.

It validates requests against the configured limits, routes them to the model deployments,
and is the one place where service errors become gRPC status codes with one-line details.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2
from ray import serve
from ray.serve.grpc_util import RayServegRPCContext
from ray.serve.handle import DeploymentHandle

from mot.v1 import mot_pb2
from mot_core.context_id import join_documents, normalize_text
from mot_core.errors import CodecError, FingerprintMismatchError, MotError
from services.config import load_config
from services.deadline import Deadline
from services.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnauthenticatedError,
)
from services.store import StoreUnavailableError

log = logging.getLogger(__name__)

API_TOKEN_ENV = "MOT_API_TOKEN"
CHUNK_BYTES = 1 << 20
TEXT_MEMORY_CHARS = 64 << 20
_CONTEXT_ID = re.compile(r"^[0-9a-f]{64}$")

_STATUS = (  # most specific first
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (FingerprintMismatchError, grpc.StatusCode.FAILED_PRECONDITION),
    (CodecError, grpc.StatusCode.DATA_LOSS),
    (MotError, grpc.StatusCode.INVALID_ARGUMENT),
)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and one-line details for an exception (unwrapping Ray's task errors)."""
    cause = getattr(exc, "cause", None)
    message = str(cause if isinstance(cause, BaseException) else exc).strip().splitlines()
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code, message[-1] if message else cls.__name__
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the service logs"


def _mode(value: int) -> str:
    name = mot_pb2.CacheMode.Name(value).removeprefix("CACHE_MODE_")
    return "AUTO" if name == "UNSPECIFIED" else name


def _source(name: str) -> int:
    return mot_pb2.CacheSource.Value(f"CACHE_SOURCE_{name}")


@serve.deployment(max_ongoing_requests=64)
class GrpcIngress:
    def __init__(
        self,
        args: dict,
        source: DeploymentHandle,
        targets: dict[str, DeploymentHandle],
        translator: DeploymentHandle | None,
    ) -> None:
        self.config = load_config(args)
        self.source, self.targets, self.translator = source, targets, translator
        self._token = os.environ.get(API_TOKEN_ENV) or None
        # Texts of recent contexts: lets native requests go on while the store is down.
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._texts_chars = 0
        self._counts: Counter[str] = Counter()  # requests served by this ingress replica, for Stats

    def _remember(self, context_id: str, text: str) -> None:
        if context_id in self._texts:
            self._texts.move_to_end(context_id)
            return
        self._texts[context_id] = text
        self._texts_chars += len(text)
        while self._texts_chars > TEXT_MEMORY_CHARS and len(self._texts) > 1:
            _, dropped = self._texts.popitem(last=False)
            self._texts_chars -= len(dropped)

    # -------------------------------------------------------------------------------- helpers

    def _fail(self, context: RayServegRPCContext, exc: BaseException) -> None:
        code, details = status_for(exc)
        self._counts[f"error_{code.name.lower()}"] += 1
        if code == grpc.StatusCode.INTERNAL:
            log.exception("request failed", exc_info=exc)
        context.set_code(code)
        context.set_details(details)

    @staticmethod
    def _budget(context: RayServegRPCContext) -> float | None:
        """Seconds the caller still waits (``mot-timeout-ms``), handed to the deployments as their budget."""
        return Deadline.from_metadata(context.invocation_metadata()).remaining()

    def _check(
        self, request, context: RayServegRPCContext, *, context_id: str | None = None, target: str | None = None
    ) -> None:
        if self._token is not None:
            metadata = dict(context.invocation_metadata())
            supplied = metadata.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(supplied.encode(), self._token.encode()):
                raise UnauthenticatedError("missing or wrong token in the 'authorization' metadata")
        if request.ByteSize() > self.config.limits.max_request_bytes:
            raise InvalidArgumentError(
                f"request of {request.ByteSize()} bytes exceeds the limit of {self.config.limits.max_request_bytes}"
            )
        if context_id is not None and not _CONTEXT_ID.match(context_id):
            raise InvalidArgumentError("context_id must be 64 lowercase hex characters (from PutContext)")
        if target is not None and target not in self.targets:
            raise InvalidArgumentError(f"unknown target model {target!r}; serving: {', '.join(self.targets)}")

    # -------------------------------------------------------------------------------- RPCs

    async def Check(self, request, grpc_context: RayServegRPCContext):
        """grpc.health.v1.Health/Check for Kubernetes gRPC probes (no token: probes send no metadata)."""
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def PutContext(self, request: mot_pb2.PutContextRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context)
            kind = request.WhichOneof("content")
            if kind is None:
                raise InvalidArgumentError("give either text or documents")
            text = request.text if kind == "text" else join_documents(list(request.documents.documents))
            reply = await self.source.put_context.remote(text)
            self._remember(reply["context_id"], normalize_text(text))
            self._counts["put_context_cached" if reply["already_cached"] else "put_context_prefilled"] += 1
            return mot_pb2.PutContextResponse(**reply)
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def Generate(
        self, request: mot_pb2.GenerateRequest, grpc_context: RayServegRPCContext
    ) -> AsyncIterator[mot_pb2.GenerateResponse]:
        try:
            self._check(request, grpc_context, context_id=request.context_id, target=request.target_model)
            s = request.sampling
            if s.temperature < 0 or not 0 <= s.top_p <= 1:
                raise InvalidArgumentError("temperature must be >= 0 and top_p in [0, 1]")
            sampling = {
                "max_new_tokens": s.max_new_tokens or 64,
                "temperature": s.temperature,
                "top_p": s.top_p or 1.0,
                "top_k": s.top_k,
                "seed": s.seed if s.HasField("seed") else None,
                "stop": tuple(s.stop),
            }
            mode = _mode(request.mode)
            if mode == "NONE":
                raise InvalidArgumentError("mode NONE is for Score only")
            handle = self.targets[request.target_model].options(stream=True)
            known, budget = self._texts.get(request.context_id), self._budget(grpc_context)
            async for item in handle.generate.remote(request.context_id, request.prompt, mode, sampling, known, budget):
                if isinstance(item, str):
                    yield mot_pb2.GenerateResponse(text=item)
                else:
                    self._counts[f"generate_{item['cache_source'].lower()}"] += 1
                    item["cache_source"] = _source(item["cache_source"])
                    yield mot_pb2.GenerateResponse(facts=mot_pb2.GenerationFacts(**item))
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def Score(self, request: mot_pb2.ScoreRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context, context_id=request.context_id, target=request.target_model)
            reply = await self.targets[request.target_model].score.remote(
                request.context_id,
                request.prompt,
                request.continuation,
                _mode(request.mode),
                self._texts.get(request.context_id),
                self._budget(grpc_context),
            )
            self._counts[f"score_{reply['cache_source'].lower()}"] += 1
            return mot_pb2.ScoreResponse(
                tokens=[mot_pb2.TokenScore(**t) for t in reply["tokens"]],
                total_logprob=reply["total_logprob"],
                cache_source=_source(reply["cache_source"]),
            )
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def GetCache(self, request: mot_pb2.GetCacheRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context, context_id=request.context_id, target=request.target_model)
            target = self.targets[request.target_model]
            blob, source = await target.get_cache.remote(
                request.context_id, self._texts.get(request.context_id), self._budget(grpc_context)
            )
            info = await target.info.remote()
            total = max(1, -(-len(blob) // CHUNK_BYTES))
            for index in range(total):
                yield mot_pb2.CacheChunk(
                    data=blob[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES],
                    index=index,
                    total=total,
                    total_bytes=len(blob),
                    target_fingerprint=info["fingerprint"],
                    cache_source=_source(source),
                )
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def DeleteContext(self, request: mot_pb2.DeleteContextRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context, context_id=request.context_id)
            deleted = await self.source.delete_context.remote(request.context_id)
            if self._texts.pop(request.context_id, None) is not None:
                deleted = max(deleted, 1)
            if not deleted:
                raise NotFoundError(f"unknown context id {request.context_id}")
            return mot_pb2.DeleteContextResponse(deleted_entries=deleted)
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def ListModels(self, request: mot_pb2.ListModelsRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context)
            infos = [await self.source.info.remote()]
            infos += [await handle.info.remote() for handle in self.targets.values()]
            return mot_pb2.ListModelsResponse(models=[mot_pb2.ModelInfo(**info) for info in infos])
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise

    async def Stats(self, request: mot_pb2.StatsRequest, grpc_context: RayServegRPCContext):
        try:
            self._check(request, grpc_context)
            try:
                stats = await self.source.stats.remote()
            except StoreUnavailableError:
                return mot_pb2.StatsResponse(store_available=False, counters=dict(self._counts))
            return mot_pb2.StatsResponse(
                store_entries=stats["entries"],
                store_bytes=stats["bytes"],
                store_budget_bytes=stats["max_bytes"],
                counters={**{f"store_{k}": stats[k] for k in ("hits", "misses", "evictions")}, **self._counts},
                store_available=True,
            )
        except Exception as exc:
            self._fail(grpc_context, exc)
            raise
