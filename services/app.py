"""The Ray Serve application: ``serve run services.app:build_app`` (args = a ServiceConfig mapping).

Composition (Ray Serve model-composition style): the gRPC ingress holds handles to the source
deployment, one deployment per target model, and the translator deployment (present when any
target has a translator). Each gets its placement (GPUs, replicas, autoscaling) from the config.
"""

from __future__ import annotations

from ray.serve import Application

from services.config import load_config
from services.deployments import (
    SourceDeployment,
    TargetDeployment,
    TranslatorDeployment,
    deployment_options,
    target_deployment_name,
)
from services.ingress import GrpcIngress

APP_NAME = "mot"
ROUTE_PREFIX = "/mot"
GRPC_SERVICER_FUNCTIONS = [
    "mot.v1.mot_pb2_grpc.add_MotCacheServicer_to_server",
    "grpc_health.v1.health_pb2_grpc.add_HealthServicer_to_server",  # standard health checking (probes)
]


def build_app(args: dict) -> Application:
    config = load_config(args)
    source = SourceDeployment.options(**deployment_options(config.source.placement, "source")).bind(args)
    translator = None
    if any(t.translator for t in config.targets):
        translator = TranslatorDeployment.options(**deployment_options(config.translator_placement, "translator")).bind(
            args, source
        )
    targets = {
        t.name: TargetDeployment.options(**deployment_options(t.placement, target_deployment_name(i))).bind(
            args, t.name, translator if t.translator else None
        )
        for i, t in enumerate(config.targets)
    }
    # the ingress only validates and routes: it reserves no CPU (Helm values can still give it some)
    ingress = GrpcIngress.options(name="ingress", ray_actor_options={"num_cpus": 0})
    return ingress.bind(args, source, targets, translator)
