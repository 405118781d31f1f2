"""Render the Helm chart with the real Helm engine, for the delivery checks.

helm-python-sdk binds Helm's Go SDK (no helm binary): ``Chart.render`` coalesces the chart's
defaults with the given values, validates them against values.schema.json and runs the templates,
exactly as ``helm install`` / ``helm template`` would (offline: ``lookup`` finds nothing).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mot"
EXAMPLES = CHART / "examples"
CRD_FILE = ROOT / "tests" / "data" / "crds" / "ray.io_rayservices.yaml"
INVALID_VALUES = Path(__file__).resolve().parent / "invalid_values"

RELEASE = "mot"
NAMESPACE = "mot-system"

# The values files the chart is proven with: the defaults and every example shipped with the chart.
VALUES_FILES: dict[str, Path | None] = {"default": None, **{p.stem: p for p in sorted(EXAMPLES.glob("*.yaml"))}}


def load_values(name: str) -> dict[str, Any]:
    path = VALUES_FILES[name]
    return {} if path is None else (yaml.safe_load(path.read_text(encoding="utf-8")) or {})


@dataclass
class Rendered:
    """One render of the chart: the Kubernetes objects (in template order) and NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str
    values: dict[str, Any] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
        return found[0]

    @property
    def rayservice(self) -> dict[str, Any]:
        return self.one("RayService")

    @property
    def serve_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.rayservice["spec"]["serveConfigV2"])

    @property
    def application(self) -> dict[str, Any]:
        apps = self.serve_config["applications"]
        assert len(apps) == 1, "the chart deploys one Ray Serve application"
        return apps[0]


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE) -> Rendered:
    """Render the chart; raises helm_python.HelmValuesError / HelmRenderError on invalid values."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(copy.deepcopy(values or {}), name=release, namespace=namespace)
        merged = chart.merge_values(copy.deepcopy(values or {}))
    objects: list[dict[str, Any]] = []
    notes = ""
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            notes = manifests[path]
            continue
        objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return Rendered(objects=objects, notes=notes, values=merged)
