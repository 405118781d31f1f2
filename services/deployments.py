"""Ray Serve deployments: thin wrappers that give each engine a process, a placement and handles.

One deployment per model (the source, each target) plus the translator, so each model gets its
own GPU in production (``num_gpus`` from the config) and CPU here. Deployments talk through
``DeploymentHandle``s; caches travel between them as codec blobs in Ray's object store, never
through the gRPC proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict

import torch
from ray import serve
from ray.serve.handle import DeploymentHandle

from mot_core.allocator import retain_freed_memory
from mot_core.generation import Sampling
from mot_core.loading import load_model_meta
from mot_core.translation.translator import TranslatorCard
from services.compute import ComputeThread
from services.config import Placement, ServiceConfig, TargetSpec, load_config
from services.deadline import Deadline
from services.engines import (
    GenerationFacts,
    SourceEngine,
    TargetEngine,
    TranslatorEngine,
    load_translators,
    read_translator_card,
)
from services.errors import InvalidArgumentError
from services.metrics import ServiceMetrics
from services.store import RedisCacheStore

log = logging.getLogger(__name__)


def deployment_options(placement: Placement, name: str) -> dict:
    options: dict = {
        "name": name,
        "ray_actor_options": {"num_gpus": placement.num_gpus, "num_cpus": placement.num_cpus},
    }
    if placement.autoscaling is not None:
        options["autoscaling_config"] = placement.autoscaling.model_dump()
    else:
        options["num_replicas"] = placement.num_replicas
    return options


LOGGED_PACKAGES = ("mot_core", "services")
SERVE_LOGGER = "ray.serve"  # Serve's documented logger: its handlers write the replica's own log file


class _IntoServeLog(logging.Handler):
    """Hands our records to Serve's replica logger, so they land beside Serve's own lines, tagged
    with the replica. A Ray worker's root logger has no handler: without this only warnings would
    get out, and only into the worker's stderr file."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(SERVE_LOGGER).handle(record)


def _log_into_replica_log() -> None:
    """Our INFO lines (each model loaded with its fingerprint, translations and their times) into
    this replica's log (``LocalService.replica_logs`` on one machine)."""
    for package in LOGGED_PACKAGES:
        logger = logging.getLogger(package)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        if not any(isinstance(h, _IntoServeLog) for h in logger.handlers):
            logger.addHandler(_IntoServeLog())


def _start_replica(
    args: dict, own_placement: Callable[[ServiceConfig], Placement]
) -> tuple[ServiceConfig, ComputeThread]:
    """What every replica does first: its logging and allocator tuning, its config, and the thread
    its model work runs on (``ComputeThread``: one on a CPU), with its torch threads."""
    _log_into_replica_log()
    retain_freed_memory()
    config = load_config(args)
    placement = own_placement(config)
    compute = ComputeThread("mot-compute", confine=placement.num_gpus == 0)
    compute.run(_set_torch_threads, placement.torch_threads)
    return config, compute


def _set_torch_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)
    log.info("replica started; torch threads: %d", torch.get_num_threads())


def target_deployment_name(index: int) -> str:
    return f"target-{index}"


@serve.deployment(max_ongoing_requests=8)
class SourceDeployment:
    def __init__(self, args: dict) -> None:
        config, self.compute = _start_replica(args, lambda c: c.source.placement)
        self.store = RedisCacheStore.from_env(config.store)
        self.metrics = ServiceMetrics("source")
        self.compute.run(self._load, config)

    def _load(self, config: ServiceConfig) -> None:
        self.engine = SourceEngine(config.source.name, self.store, config.store, config.limits)
        log.info("source %s warmed up in %.2f s", config.source.name, self.metrics.warm_up(self.engine))

    def put_context(self, text: str) -> dict:
        with self.metrics.time("prefill"):
            reply = self.compute.run(self.engine.put_context, text)
        self.metrics.count("put_context_cached" if reply["already_cached"] else "put_context_prefilled")
        if not reply["already_cached"]:
            self.metrics.stored(reply["stored_bytes"])
        return reply

    def source_cache(self, context_id: str, known_text: str | None = None) -> bytes:
        return self.compute.run(self.engine.source_cache, context_id, known_text)

    def delete_context(self, context_id: str) -> int:
        return self.store.delete_context(context_id)

    def stats(self) -> dict:
        return asdict(self.store.stats())

    def info(self) -> dict:
        return self.engine.info()


@serve.deployment(max_ongoing_requests=16)
class TranslatorDeployment:
    def __init__(self, args: dict, source: DeploymentHandle) -> None:
        config, self.compute = _start_replica(args, lambda c: c.translator_placement)
        self.store = RedisCacheStore.from_env(config.store)
        self.source = source
        self.metrics = ServiceMetrics("translator")
        self.compute.run(self._load, config)

    def _load(self, config: ServiceConfig) -> None:
        translators = load_translators(config)
        targets = {name: load_model_meta(name, first_layer=t.reads_first_layer) for name, t in translators.items()}
        self.engine = TranslatorEngine(
            load_model_meta(config.source.name),
            targets,
            translators,
            self.store,
            config.store,
            self._fetch_source,
            on_stored=self.metrics.stored,
            warm_up_tokens=config.warm_up_tokens,
        )
        log.info("translators to %s warmed up in %.2f s", ", ".join(translators), self.metrics.warm_up(self.engine))

    def _fetch_source(self, context_id: str, known_text: str | None) -> bytes:
        return self.source.source_cache.remote(context_id, known_text).result()

    def translate(
        self, context_id: str, target: str, known_text: str | None = None, budget_s: float | None = None
    ) -> tuple[bytes, float]:
        blob, seconds = self.compute.run(self.engine.translate, context_id, target, known_text, Deadline(budget_s))
        if seconds > 0:
            self.metrics.observe("translate", seconds)
        return blob, seconds


@serve.deployment(max_ongoing_requests=8)
class TargetDeployment:
    def __init__(self, args: dict, name: str, translator: DeploymentHandle | None) -> None:
        config, self.compute = _start_replica(args, lambda c: c.target(name).placement)
        self.store = RedisCacheStore.from_env(config.store)
        spec = config.target(name)
        card: TranslatorCard | None = read_translator_card(spec.translator) if spec.translator else None
        self.translator = translator if card is not None else None
        self.metrics = ServiceMetrics(name)
        self.compute.run(self._load, config, spec, card)

    def _load(self, config: ServiceConfig, spec: TargetSpec, card: TranslatorCard | None) -> None:
        self.engine = TargetEngine(
            spec,
            None,
            self.store,
            config.limits,
            self._translate if card is not None else None,
            translator_card=card,
            storage_dtype=config.store.storage_dtype,
            on_stored=self.metrics.stored,
        )
        if card is not None and card.target_fingerprint != self.engine.lm.fingerprint.id:
            raise InvalidArgumentError(
                f"translator {spec.translator} produces caches for {card.target_fingerprint}, "
                f"but target {spec.name} is {self.engine.lm.fingerprint.id}"
            )
        log.info("target %s warmed up in %.2f s", spec.name, self.metrics.warm_up(self.engine))

    def _translate(
        self, context_id: str, target: str, known_text: str | None, budget_s: float | None
    ) -> tuple[bytes, float]:
        return self.translator.translate.remote(context_id, target, known_text, budget_s).result()

    def generate(
        self,
        context_id: str,
        prompt: str,
        mode: str,
        sampling: dict,
        known_text: str | None = None,
        budget_s: float | None = None,
    ) -> Iterator[str | dict]:
        facts, deadline = None, Deadline(budget_s)
        items = self.engine.generate(context_id, prompt, mode, Sampling(**sampling), known_text, deadline)
        for item in self.compute.iterate(items):
            if isinstance(item, GenerationFacts):
                facts = item
                yield asdict(item)
            else:
                yield item
        if facts is not None:
            self.metrics.count(f"cache_{facts.cache_source.lower()}")
            self.metrics.observe("ttft", facts.ttft_ms / 1000)

    def score(
        self,
        context_id: str,
        prompt: str,
        continuation: str,
        mode: str,
        known_text: str | None = None,
        budget_s: float | None = None,
    ) -> dict:
        reply = self.compute.run(
            self.engine.score, context_id, prompt, continuation, mode, known_text, Deadline(budget_s)
        )
        self.metrics.count(f"cache_{reply['cache_source'].lower()}")
        return reply

    def get_cache(
        self, context_id: str, known_text: str | None = None, budget_s: float | None = None
    ) -> tuple[bytes, str]:
        return self.compute.run(self.engine.get_cache, context_id, known_text, Deadline(budget_s))

    def info(self) -> dict:
        return self.engine.info()
