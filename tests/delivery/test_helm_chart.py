"""The Helm chart (helm/mot), proven without a cluster.

For the default values and every example values file: helm lint, render with the real Helm engine,
validate core objects against the Kubernetes schemas (kubernetes-validate, strict), the RayService
against KubeRay's CRD schema (tests/data/crds, see SOURCE.md there), and the serveConfigV2 against
Ray Serve's own schema, the service's config loader and the application builder itself. Invalid
values files must fail, and a third target model must need nothing but a values change.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from services.config import IMPORT_PATH, ServiceConfig, load_config
from tests.delivery.helm_render import (
    CHART,
    CRD_FILE,
    INVALID_VALUES,
    NAMESPACE,
    RELEASE,
    ROOT,
    VALUES_FILES,
    Rendered,
    load_values,
    render,
)

# The chart's kubeVersion floor (native gRPC probes are GA in 1.27) and the newest schemas shipped.
K8S_VERSIONS = ["1.27", latest_version()]
CORE_KINDS = {"ConfigMap", "Secret", "Service", "StatefulSet", "PersistentVolumeClaim"}
NAMES = list(VALUES_FILES)
GPU_NAMES = [n for n in NAMES if n != "values-cpu"]


# ------------------------------------------------------------------------------------ helpers


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected, as the API server's strict field validation does."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (_closed(v) if k != "properties" else {p: _closed(s) for p, s in v.items()}) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def rayservice_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load(CRD_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == "RayService"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return jsonschema.Draft7Validator(_closed(v1["schema"]["openAPIV3Schema"]))


def crd_errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in rayservice_validator().iter_errors(obj)]


def _pod_templates(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    for group in cluster.get("workerGroupSpecs", []):
        templates[f"worker/{group['groupName']}"] = group["template"]
    return templates


def _quantity(value: str | int | float) -> float:
    text = str(value)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def _worker_pods(r: Rendered, *, at_peak: bool) -> list[dict[str, float]]:
    """Ray's view of the worker pods: {cpu, gpu} each (KubeRay derives num-cpus/num-gpus from limits)."""
    cluster = r.rayservice["spec"]["rayClusterConfig"]
    autoscaling = cluster.get("enableInTreeAutoscaling", False)
    pods = []
    for group in cluster["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        limits = container.get("resources", {}).get("limits", {})
        params = group.get("rayStartParams", {})
        cpu = float(params.get("num-cpus", math.ceil(_quantity(limits["cpu"]))))
        gpu = float(params.get("num-gpus", limits.get("nvidia.com/gpu", 0)))
        count = group["maxReplicas"] if (at_peak and autoscaling) else group["replicas"]
        pods.extend({"cpu": cpu, "gpu": gpu} for _ in range(count))
    return pods


def _replicas(r: Rendered, *, at_peak: bool) -> list[tuple[str, float, float]]:
    """Every Serve replica as (deployment, cpu, gpu), at the minimum or at peak (max replicas)."""
    out = []
    for d in r.application["deployments"]:
        opts = d["ray_actor_options"]
        if "autoscaling_config" in d:
            count = d["autoscaling_config"]["max_replicas" if at_peak else "min_replicas"]
        else:
            count = d["num_replicas"]
        out.extend((d["name"], float(opts.get("num_cpus", 1)), float(opts.get("num_gpus", 0))) for _ in range(count))
    return out


def _place(replicas: list[tuple[str, float, float]], pods: list[dict[str, float]]) -> list[str]:
    """First-fit decreasing, as a feasibility check; returns the replicas that found no pod."""
    free = [dict(p) for p in pods]
    unplaced = []
    for name, cpu, gpu in sorted(replicas, key=lambda r: (-r[2], -r[1])):
        for pod in free:
            if pod["cpu"] >= cpu and pod["gpu"] >= gpu:
                pod["cpu"] -= cpu
                pod["gpu"] -= gpu
                break
        else:
            unplaced.append(name)
    return unplaced


def _expected_error(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = re.match(r"^# expect: (.+)$", first)
    assert match, f"{path.name}: the first line must be '# expect: <part of the error message>'"
    return match.group(1).strip()


# ------------------------------------------------------------------------------------ lint and render


def test_every_example_values_file_is_tested():
    examples = sorted(p.name for p in (CHART / "examples").glob("*.yaml"))
    assert examples == ["values-cpu.yaml", "values-gpu.yaml"]
    assert set(NAMES) == {"default", "values-cpu", "values-gpu"}


@pytest.mark.parametrize("name", NAMES)
def test_helm_lint_is_clean(name):
    report = helm.lint(CHART, load_values(name), strict=True, namespace=NAMESPACE, kube_version="v1.27.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]


@pytest.mark.parametrize("name", NAMES)
def test_renders_the_expected_objects(rendered, name):
    r = rendered[name]
    kinds = sorted(o["kind"] for o in r.objects)
    assert kinds.count("RayService") == 1
    assert "Service" in kinds
    if r.values["redis"]["enabled"]:
        assert kinds.count("StatefulSet") == 1
    if r.values["metrics"]["serviceMonitor"]["enabled"]:
        assert kinds.count("ServiceMonitor") == 1
    for obj in r.objects:
        meta = obj["metadata"]
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE, meta["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]) and len(meta["name"]) <= 63
        assert "namespace" not in meta  # helm install -n decides


# ------------------------------------------------------------------------------------ schemas


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", NAMES)
def test_core_objects_match_kubernetes_schemas(rendered, name, version):
    r = rendered[name]
    checked = 0
    for obj in r.objects:
        if obj["kind"] in CORE_KINDS:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
    # The Ray pods too: each head/worker template as a core PodTemplate.
    for group, template in _pod_templates(r.rayservice).items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": group.replace("/", "-")}}
        kubernetes_validate.validate({**pod_template, "template": template}, version, strict=True)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", NAMES)
def test_rayservice_matches_kuberay_crd(rendered, name):
    rs = rendered[name].rayservice
    assert rs["apiVersion"] == "ray.io/v1"
    assert crd_errors(rs) == []
    # KubeRay's own rule: a DNS-1035 label of at most 47 characters (it appends suffixes).
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", rs["metadata"]["name"])
    assert len(rs["metadata"]["name"]) <= 47


def test_crd_validation_is_strict(rendered):
    """The CRD check rejects what the API server would: unknown fields and wrong types."""
    rs = copy.deepcopy(rendered["default"].rayservice)
    rs["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParam"] = {"typo": "1"}
    rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "four"
    errors = crd_errors(rs)
    assert any("rayStartParam" in e for e in errors), errors
    assert any("replicas" in e for e in errors), errors


def test_long_release_names_fit_kubernetes_limits():
    r = render({}, release="a-very-long-release-name-for-the-mot-cache-service-x")
    assert len(r.rayservice["metadata"]["name"]) <= 47
    assert all(len(o["metadata"]["name"]) <= 63 for o in r.objects)
    assert len(r.one("StatefulSet")["metadata"]["name"]) <= 52  # + "-<revision hash>" must fit a label
    r = render({}, release="1st")
    assert r.rayservice["metadata"]["name"] == "mot-1st-mot"
    assert crd_errors(r.rayservice) == []


# ------------------------------------------------------------------------------------ serveConfigV2


@pytest.mark.parametrize("name", NAMES)
def test_serve_config_is_accepted_by_ray_serve_and_the_service(rendered, name):
    from ray.serve.schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema

    r = rendered[name]
    config = r.serve_config
    ServeDeploySchema.model_validate(config)  # Ray Serve's own schema (what KubeRay submits)
    # Ray ignores unknown keys silently; a typo would be lost, so require known ones.
    assert set(config) <= set(ServeDeploySchema.model_fields)
    app = r.application
    assert set(app) <= set(ServeApplicationSchema.model_fields)
    for d in app["deployments"]:
        assert set(d) <= set(DeploymentSchema.model_fields), d["name"]

    assert app["import_path"] == IMPORT_PATH
    service = load_config(app["args"])  # exactly what `mot serve` and build_app use
    assert isinstance(service, ServiceConfig)
    assert service.grpc_port == config["grpc_options"]["port"] == r.values["service"]["grpcPort"]
    assert service.metrics_port == r.values["metrics"]["port"]


@pytest.mark.parametrize("name", NAMES)
def test_serve_config_matches_the_application(rendered, name):
    """Names, replicas and resources in serveConfigV2 are exactly those build_app gives the deployments."""
    from ray.serve._private.build_app import build_app as build_serve_app

    from services.app import APP_NAME, GRPC_SERVICER_FUNCTIONS, ROUTE_PREFIX, build_app

    r = rendered[name]
    app = r.application
    assert app["name"] == APP_NAME and app["route_prefix"] == ROUTE_PREFIX
    assert set(GRPC_SERVICER_FUNCTIONS) <= set(r.serve_config["grpc_options"]["grpc_servicer_functions"])

    built = build_serve_app(build_app(app["args"]), name=app["name"])
    from_code = {d.name: d for d in built.deployments}
    overrides = {d["name"]: d for d in app["deployments"]}
    assert set(overrides) == set(from_code), "every override must name a deployment of the application"
    for dep_name, override in overrides.items():
        if dep_name == "ingress":
            continue  # its resources are the chart's (serve.ingress); the code leaves Ray's defaults
        deployment = from_code[dep_name]
        actor = deployment.ray_actor_options or {}
        for key, value in override["ray_actor_options"].items():
            assert float(actor.get(key, 1 if key == "num_cpus" else 0)) == float(value), (dep_name, key)
        if "autoscaling_config" in override:
            auto = deployment._deployment_config.autoscaling_config
            for key in ("min_replicas", "max_replicas", "target_ongoing_requests"):
                assert float(getattr(auto, key)) == float(override["autoscaling_config"][key]), (dep_name, key)
        else:
            assert deployment._deployment_config.num_replicas == override["num_replicas"], dep_name


@pytest.mark.parametrize("name", NAMES)
def test_deployment_names_follow_the_targets(rendered, name):
    r = rendered[name]
    service = load_config(r.application["args"])
    expected = ["source", *(f"target-{i}" for i in range(len(service.targets)))]
    if any(t.translator for t in service.targets):
        expected.append("translator")
    assert [d["name"] for d in r.application["deployments"]] == [*expected, "ingress"]


def test_no_translator_deployment_without_translators():
    values = {"mot": {"targets": [{"name": "gemma3-270m", "placement": {"num_gpus": 1}}]}}
    r = render(values)
    assert [d["name"] for d in r.application["deployments"]] == ["source", "target-0", "ingress"]
    assert r.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 2


# ------------------------------------------------------------------------------------ placement


@pytest.mark.parametrize("name", NAMES)
def test_every_replica_fits_the_ray_cluster(rendered, name):
    """At the minimum and at peak, each Serve replica finds a worker pod with its CPUs and GPUs."""
    r = rendered[name]
    head = r.rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0" and head["rayStartParams"]["num-gpus"] == "0"
    (head_container,) = head["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(head_container.get("resources", {}))
    for at_peak in (False, True):
        unplaced = _place(_replicas(r, at_peak=at_peak), _worker_pods(r, at_peak=at_peak))
        assert unplaced == [], f"{'peak' if at_peak else 'minimum'}: no room for {unplaced}"


@pytest.mark.parametrize("name", GPU_NAMES)
def test_gpu_values_put_each_model_on_its_own_gpu(rendered, name):
    r = rendered[name]
    models = [d for d in r.application["deployments"] if d["name"] != "ingress"]
    assert all(d["ray_actor_options"]["num_gpus"] == 1 for d in models)
    gpus_min = sum(g for _, _, g in _replicas(r, at_peak=False))
    gpus_peak = sum(g for _, _, g in _replicas(r, at_peak=True))
    assert sum(p["gpu"] for p in _worker_pods(r, at_peak=False)) == gpus_min
    assert sum(p["gpu"] for p in _worker_pods(r, at_peak=True)) == gpus_peak
    for group in r.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", []))


def test_cpu_values_use_no_gpu(rendered):
    r = rendered["values-cpu"]
    assert all(d["ray_actor_options"].get("num_gpus", 0) == 0 for d in r.application["deployments"])
    assert "nvidia.com/gpu" not in json.dumps(r.rayservice)
    assert r.rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "image"
    ].endswith("-cpu")


@pytest.mark.parametrize("name", ["default", "values-gpu"])
def test_a_third_target_is_a_values_change(name):
    """Appending a target model to the values adds a deployment with its own GPU, and the GPU for it."""
    values = load_values(name)
    before = render(values)
    merged = copy.deepcopy(before.values)
    third = {
        "name": "meta-llama/Llama-3.2-1B",
        "translator": "smollm2-135m__llama-3.2-1b",
        "placement": {"num_gpus": 1, "num_cpus": 2, "num_replicas": 1},
    }
    values = {**values, "mot": {**values.get("mot", {}), "targets": [*merged["mot"]["targets"], third]}}
    after = render(values)

    added = [d for d in after.application["deployments"] if d["name"] == "target-2"]
    assert len(added) == 1 and added[0]["ray_actor_options"]["num_gpus"] == 1
    assert added[0].get("num_replicas") == 1
    assert load_config(after.application["args"]).targets[2].name == "meta-llama/Llama-3.2-1B"
    for at_peak in (False, True):
        gpus_before = sum(p["gpu"] for p in _worker_pods(before, at_peak=at_peak))
        gpus_after = sum(p["gpu"] for p in _worker_pods(after, at_peak=at_peak))
        assert gpus_after == gpus_before + 1
        assert _place(_replicas(after, at_peak=at_peak), _worker_pods(after, at_peak=at_peak)) == []
    assert crd_errors(after.rayservice) == []
    # Existing deployments keep their names and options.
    old = {d["name"]: d for d in before.application["deployments"]}
    new = {d["name"]: d for d in after.application["deployments"]}
    assert all(new[n] == d for n, d in old.items())


# ------------------------------------------------------------------------------------ service, probes, metrics


@pytest.mark.parametrize("name", NAMES)
def test_grpc_service_reaches_ready_workers_only(rendered, name):
    r = rendered[name]
    service = r.one("Service", r.rayservice["metadata"]["name"])
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["grpc"]["port"] == r.values["service"]["grpcPort"]
    assert ports["metrics"]["port"] == load_config(r.application["args"]).metrics_port
    selector = service["spec"]["selector"]
    head = r.rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    assert not selector.items() <= head["metadata"]["labels"].items()
    servicers = r.serve_config["grpc_options"]["grpc_servicer_functions"]
    for group in r.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        template = group["template"]
        assert selector.items() <= template["metadata"]["labels"].items()
        (container,) = template["spec"]["containers"]
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named["grpc"] == ports["grpc"]["port"] and named["metrics"] == ports["metrics"]["port"]
        probe = container["readinessProbe"]["grpc"]
        assert probe["port"] == ports["grpc"]["port"]
    assert r.values["service"]["healthProbe"]["servicerFunction"] in servicers


def test_service_monitor_scrapes_the_service(rendered):
    r = rendered["values-gpu"]
    monitor = r.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service = r.one("Service", r.rayservice["metadata"]["name"])
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert re.fullmatch(r"\d+(ms|s|m|h)", endpoint["interval"])
    assert not rendered["default"].of_kind("ServiceMonitor")


# ------------------------------------------------------------------------------------ secrets and Redis


def _env(r: Rendered) -> dict[str, dict[str, Any]]:
    (container,) = r.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("name", NAMES)
def test_secrets_come_from_secrets(rendered, name):
    r = rendered[name]
    env = _env(r)
    token = env["MOT_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["name"] == (r.values["auth"]["existingSecret"] or f"{r.rayservice['metadata']['name']}-auth")
    url = env["MOT_REDIS_URL"]
    if r.values["redis"]["enabled"]:
        assert url["value"].startswith("redis://:$(MOT_REDIS_PASSWORD)@")
        assert "secretKeyRef" in env["MOT_REDIS_PASSWORD"]["valueFrom"]
        names = list(env)
        assert names.index("MOT_REDIS_PASSWORD") < names.index("MOT_REDIS_URL")  # $(VAR) needs it first
    else:
        assert "secretKeyRef" in url["valueFrom"]
    # No generated secret value leaks into the RayService (readable by more people than Secrets).
    for secret in r.of_kind("Secret"):
        for value in secret["data"].values():
            assert value not in json.dumps(r.rayservice)


@pytest.mark.parametrize("name", NAMES)
def test_redis_is_a_bounded_cache(rendered, name):
    r = rendered[name]
    config = r.one("ConfigMap")["data"]["redis.conf"]
    assert re.search(r"^maxmemory \d+[kmg]b?$", config, re.M)
    assert re.search(r"^maxmemory-policy allkeys-lru$", config, re.M)
    sts = r.one("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert "$(REDIS_PASSWORD)" in container["command"]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]
    persistent = r.values["redis"]["persistence"]["enabled"]
    assert bool(sts["spec"].get("volumeClaimTemplates")) == persistent
    # The service's own byte budget stays below Redis' cap (Redis units: 1gb = 1024^3 bytes).
    number, unit = re.fullmatch(r"(\d+)([kmg]?)b?", str(r.values["redis"]["maxmemory"]).lower()).groups()
    cap = int(number) * 1024 ** " kmg".index(unit or " ")
    assert load_config(r.application["args"]).store.max_bytes < cap


def test_values_have_no_place_for_secrets():
    """Secrets are referenced by Secret name and key; values.schema.json has no field for a password or token."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))

    def names(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = list(node.get("properties", {})) if isinstance(node.get("properties"), dict) else []
            return found + [n for v in node.values() for n in names(v)]
        return [n for v in node for n in names(v)] if isinstance(node, list) else []

    sensitive = [n for n in names(schema) if re.search(r"(?i)password|token$|secret", n)]
    assert sensitive and all(re.search(r"(?i)(secrets?|secretkey)$", n) for n in sensitive), sensitive
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert defaults["auth"]["enabled"] and defaults["redis"]["external"]["url"] == ""


def test_external_redis_from_a_secret():
    values = {"redis": {"enabled": False, "external": {"existingSecret": "shared-redis", "existingSecretKey": "url"}}}
    r = render(values)
    assert not r.of_kind("StatefulSet") and not r.of_kind("ConfigMap")
    assert [s["metadata"]["name"] for s in r.of_kind("Secret")] == [f"{r.rayservice['metadata']['name']}-auth"]
    assert _env(r)["MOT_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "shared-redis", "key": "url"}
    assert crd_errors(r.rayservice) == []


def test_external_redis_url_from_values_goes_into_a_secret():
    r = render({"redis": {"enabled": False, "external": {"url": "rediss://redis.example.com:6380/0"}}})
    (secret,) = [s for s in r.of_kind("Secret") if s["metadata"]["name"].endswith("-redis-external")]
    assert _env(r)["MOT_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    assert "WARNING" in r.notes


def test_redis_tls():
    r = render({"redis": {"tls": {"enabled": True, "existingSecret": "mot-redis-tls"}}})
    config = r.one("ConfigMap")["data"]["redis.conf"]
    assert "port 0" in config and "tls-port 6379" in config
    url = _env(r)["MOT_REDIS_URL"]["value"]
    assert url.startswith("rediss://") and url.endswith("?ssl_ca_certs=/etc/mot/redis-tls/ca.crt")
    for template in _pod_templates(r.rayservice).values():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["redis-tls"]["secret"]["secretName"] == "mot-redis-tls"
    for version in K8S_VERSIONS:
        for obj in r.objects:
            if obj["kind"] in CORE_KINDS:
                kubernetes_validate.validate(obj, version, strict=True)
    assert crd_errors(r.rayservice) == []


def test_auth_can_be_disabled():
    r = render({"auth": {"enabled": False}})
    assert "MOT_API_TOKEN" not in _env(r)
    assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"].endswith("-auth")]
    assert "WARNING: auth.enabled is false" in r.notes


# ------------------------------------------------------------------------------------ values schema


def _props(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Resolve a local $ref / anyOf-with-null wrapper to the object schema behind it."""
    while True:
        if "$ref" in schema:
            *_, section, name = schema["$ref"].split("/")
            schema = root[section][name]
        elif "anyOf" in schema or "oneOf" in schema:
            (schema,) = [s for s in schema.get("anyOf", schema.get("oneOf")) if s.get("type") != "null"]
        else:
            return schema


def test_values_schema_mirrors_the_service_config():
    """mot.* in values.schema.json has the fields, types and bounds of services/config.py (minus ports)."""
    chart = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    service = ServiceConfig.model_json_schema()

    def compare(ours: dict[str, Any], theirs: dict[str, Any], where: str) -> None:
        ours, theirs = _props(ours, chart), _props(theirs, service)
        if theirs.get("type") == "array":
            assert ours.get("minItems", 0) == theirs.get("minItems", 0), where
            compare(ours["items"], theirs["items"], f"{where}[]")
            return
        if "properties" not in theirs:
            for bound in ("minimum", "maximum", "exclusiveMinimum", "minLength"):
                assert ours.get(bound) == theirs.get(bound), f"{where}: {bound}"
            ours_kinds = set(ours["type"]) if isinstance(ours.get("type"), list) else {ours.get("type")}
            assert ours_kinds - {"null"} == {theirs.get("type")}, where
            return
        assert ours.get("additionalProperties") is False, where
        assert set(ours["properties"]) == set(theirs["properties"]), where
        assert set(ours.get("required", [])) == set(theirs.get("required", [])), where
        for key in theirs["properties"]:
            compare(ours["properties"][key], theirs["properties"][key], f"{where}.{key}")

    mot = chart["properties"]["mot"]
    without_ports = copy.deepcopy(service)
    for port in ("grpc_port", "metrics_port"):
        del without_ports["properties"][port]
    compare(mot, without_ports, "mot")


@pytest.mark.parametrize("path", sorted(INVALID_VALUES.glob("*.yaml")), ids=lambda p: p.stem)
def test_invalid_values_fail(path):
    """Each file under invalid_values/ must be refused by helm install/template (schema or template check).

    helm lint reports the schema violations too; it turns the templates' `fail` into log lines (lint
    tolerates charts that fail on missing values), so those are proven by rendering alone.
    """
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    expected = _expected_error(path)
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as failure:
        render(values)
    assert expected in str(failure.value)
    if isinstance(failure.value, helm.HelmValuesError):
        report = helm.lint(CHART, values, strict=True)
        assert any(expected in e for e in report["errors"]), report


def test_there_are_invalid_values_files():
    assert len(list(INVALID_VALUES.glob("*.yaml"))) >= 8


# ------------------------------------------------------------------------------------ docs and notes


@pytest.mark.parametrize("name", NAMES)
def test_notes_say_how_to_call_the_service(rendered, name):
    notes = rendered[name].notes
    fullname = rendered[name].rayservice["metadata"]["name"]
    assert f"port-forward svc/{fullname}" in notes
    assert "services.client" in notes and "mot.v1" in notes
    if rendered[name].values["auth"]["enabled"]:
        assert "MOT_API_TOKEN" in notes


def test_deployment_docs_cover_the_chart():
    doc = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    for needed in ("KubeRay", "helm install", "values-gpu.yaml", "values-cpu.yaml", "services.client", "mot.v1"):
        assert needed in doc, needed
    for path in re.findall(r"helm/mot/[\w./-]+\.yaml", doc):
        assert (ROOT / path).is_file(), path
    assert "target-<i>" in doc and "translator" in doc


def test_vendored_crd_keeps_its_source_note():
    note = (CRD_FILE.parent / "SOURCE.md").read_text(encoding="utf-8")
    assert "ray-project/kuberay" in note and "ray.io_rayservices.yaml" in note


@pytest.mark.parametrize("enabled", [True, False])
def test_grpc_reflection_is_set_explicitly(enabled):
    """Ray Serve enables reflection unless told otherwise, so the chart always says which."""
    r = render({"serve": {"grpcReflection": enabled}})
    assert r.serve_config["grpc_options"]["enable_reflection"] is enabled
