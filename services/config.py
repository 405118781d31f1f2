"""The service configuration: which models run where, and the limits the API enforces.

One schema for every way the service starts: ``mot serve --config FILE`` reads a YAML file of
this shape, and on Kubernetes the Helm chart renders the same mapping as the ``args`` of the
Ray Serve application in the RayService's ``serveConfigV2``. ``ServiceConfig.model_validate``
is the single loader for both, so a chart that renders an invalid config fails in CI.
Secrets (Redis password, API token) are never part of it: they come from the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

IMPORT_PATH = "services.app:build_app"  # Ray Serve application builder (``serve run`` compatible)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Autoscaling(_Strict):
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas must be >= min_replicas")
        return self


class Placement(_Strict):
    """Where one deployment runs: ``num_gpus: 1`` gives each model its own GPU; 0 runs on CPU."""

    num_gpus: float = Field(0, ge=0)
    num_cpus: float = Field(1, ge=0)
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="intra-op threads of each replica; none: Ray's default, num_cpus (at least 1). Set it "
        "when num_cpus is 0 (no reservation), where Ray gives each replica a single thread",
    )
    num_replicas: int = Field(1, ge=1)
    autoscaling: Autoscaling | None = None


class ModelSpec(_Strict):
    name: str = Field(..., min_length=1, description="zoo name, local directory or Hugging Face id")
    placement: Placement = Placement()


class TargetSpec(ModelSpec):
    translator: str | None = Field(
        None, description="translator checkpoint (shipped name or path); none: native prefill only"
    )


class StoreConfig(_Strict):
    """Redis cache store. The URL (with password / TLS) comes from ``MOT_REDIS_URL``; none: embedded."""

    namespace: str = Field("mot", pattern=r"^[A-Za-z0-9_.:-]+$")
    ttl_seconds: int = Field(24 * 3600, ge=1)
    max_bytes: int = Field(2 << 30, ge=1 << 20)
    chunk_bytes: int = Field(8 << 20, ge=1 << 16, le=512 << 20)
    storage_dtype: str = Field("bfloat16", pattern=r"^(float32|bfloat16|float16|int8)$")


class Limits(_Strict):
    max_context_chars: int = Field(200_000, ge=1)
    max_context_tokens: int = Field(4096, ge=16)
    max_prompt_chars: int = Field(20_000, ge=1)
    max_new_tokens: int = Field(512, ge=1)
    max_request_bytes: int = Field(4 << 20, ge=1024)


class ServiceConfig(_Strict):
    source: ModelSpec
    targets: list[TargetSpec] = Field(..., min_length=1)
    translator_placement: Placement = Placement()
    grpc_port: int = Field(9000, ge=1, le=65535)
    metrics_port: int = Field(9090, ge=1, le=65535)
    store: StoreConfig = StoreConfig()
    limits: Limits = Limits()
    # the translator replica runs its matmuls at start for contexts up to this many target tokens
    # (MixtureTranslator.warm_up_shapes: on a CPU with bfloat16 matmuls the first context of each
    # size otherwise pays to build kernels); 0: only the short warm-up text
    warm_up_tokens: int = Field(1024, ge=0)

    @model_validator(mode="after")
    def _unique_targets(self) -> ServiceConfig:
        names = [t.name for t in self.targets]
        if len(set(names)) != len(names):
            raise ValueError(f"target models must be unique, got {names}")
        if self.grpc_port == self.metrics_port:
            raise ValueError("grpc_port and metrics_port must differ")
        return self

    def target(self, name: str) -> TargetSpec:
        for spec in self.targets:
            if spec.name == name:
                return spec
        raise KeyError(f"no target {name!r} in the config (targets: {[t.name for t in self.targets]})")


def load_config(source: Path | str | dict[str, Any]) -> ServiceConfig:
    """Validate a config from a YAML file path or an already-parsed mapping (serveConfigV2 ``args``)."""
    if isinstance(source, dict):
        return ServiceConfig.model_validate(source)
    data = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a YAML mapping at the top level")
    return ServiceConfig.model_validate(data)
