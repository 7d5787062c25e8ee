"""Wheels of installed distributions, so `tatolab new` can fill a project's ``.venv`` offline.

A project's ``.venv`` must hold the SDK of the same version as the runtime. The runtime's
own environment already holds it (and its dependencies, built for this interpreter), so
we pack those installed files back into wheels and let pip install them with
``--no-index``: no package index, no network, no build backend, and exactly the runtime's
version. An editable install (a source checkout) is packed from its package folder.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

_SKIPPED_DIST_INFO = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
# the oldest Python the compiled module's stable ABI serves: Py_LIMITED_API in _native.c, py_limited_api in setup.py
LIMITED_API = "cp311"


class WheelError(Exception):
    pass


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def runtime_requirements(dist: metadata.Distribution) -> list[str]:
    """Names of ``dist``'s unconditional dependencies (extras such as ``[runtime]`` left out)."""
    names = []
    for requirement in dist.requires or []:
        requirement_text, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement_text)
        if match:
            names.append(match.group(1))
    return names


def _installed_files(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    """(path inside the wheel, file on disk) for a distribution installed from a wheel, from its RECORD."""
    files: list[tuple[str, Path]] = []
    for entry in dist.files or []:
        parts = entry.parts
        if not parts or parts[0] == ".." or "__pycache__" in parts:
            continue  # scripts outside site-packages: pip makes them again from entry_points.txt
        if parts[0].endswith(".dist-info") and parts[-1] in _SKIPPED_DIST_INFO:
            continue
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            files.append((entry.as_posix(), path))
    if not any(rel.split("/")[0].endswith(".dist-info") for rel, _ in files):
        raise WheelError(f"{dist.metadata['Name']} was not installed from a wheel; reinstall it with pip")
    return files


def _wheel_tags(wheel_text: str) -> str:
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    if not tags:
        return "py3-none-any"
    parts = [tag.split("-") for tag in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def tatolab_tag(package: Path) -> str:
    """The wheel tag for what the package folder holds: ``py3-none-any`` when it is pure Python;
    with the compiled module (tatolab/_links/_native*.so), the Python, ABI and platform it was
    built for, so that pip on another machine or Python refuses the wheel, saying so, instead
    of installing a binary that cannot load (on arm64 the links need it: tatolab/_links/futex.py)."""
    compiled = sorted(path.name for path in package.rglob("*.so") if "__pycache__" not in path.parts)
    if not compiled:
        return "py3-none-any"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if all(name.endswith(".abi3.so") for name in compiled):
        return f"{LIMITED_API}-abi3-{platform}"
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{python}-{python}-{platform}"


class _WheelWriter:
    def __init__(self, target: Path, info: str) -> None:
        self.target = target
        self.info = info
        self.zip = zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED)
        self.record = io.StringIO()
        self.rows = csv.writer(self.record, lineterminator="\n")

    def add(self, arcname: str, data: bytes) -> None:
        self.zip.writestr(arcname, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.rows.writerow([arcname, f"sha256={digest}", len(data)])

    def close(self) -> Path:
        self.rows.writerow([f"{self.info}/RECORD", "", ""])
        self.zip.writestr(f"{self.info}/RECORD", self.record.getvalue())
        self.zip.close()
        return self.target


def pack_installed(dist_name: str, out_dir: Path) -> Path:
    """A wheel of ``dist_name`` as installed here (compiled parts included), from its RECORD."""
    dist = metadata.distribution(dist_name)
    name, version = normalized(dist.metadata["Name"]), dist.version
    info = f"{name}-{version}.dist-info"
    wheel_text = dist.read_text("WHEEL") or ""
    writer = _WheelWriter(out_dir / f"{name}-{version}-{_wheel_tags(wheel_text)}.whl", info)
    for arcname, path in _installed_files(dist):
        top, _, rest = arcname.partition("/")
        if top.endswith(".dist-info"):
            arcname = f"{info}/{rest}"
        writer.add(arcname, path.read_bytes())
    return writer.close()


def pack_tatolab(out_dir: Path) -> Path:
    """A wheel of the tatolab running this code, from its package folder.

    The package folder is the one source that always matches what the runtime runs: an
    install from a wheel, an editable source checkout, or stale metadata beside a checkout.
    """
    import tatolab

    version = tatolab.__version__
    info = f"tatolab-{version}.dist-info"
    package = Path(tatolab.__file__).parent
    tag = tatolab_tag(package)
    writer = _WheelWriter(out_dir / f"tatolab-{version}-{tag}.whl", info)
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package.parent)
        if path.is_file() and "__pycache__" not in relative.parts and path.suffix != ".pyc":
            writer.add(relative.as_posix(), path.read_bytes())
    try:
        dist = metadata.distribution("tatolab")
        requires, entry_points = dist.requires or [], dist.read_text("entry_points.txt") or ""
        summary = dist.metadata.get("Summary") or ""  # type: ignore[attr-defined]  # (an email Message at runtime)
    except metadata.PackageNotFoundError:
        requires, entry_points, summary = [], "", ""
    lines = ["Metadata-Version: 2.1", "Name: tatolab", f"Version: {version}", f"Summary: {summary}"]
    extras = dict.fromkeys(re.findall(r"extra\s*==\s*[\"']([^\"']+)", " ".join(requires)))
    lines += [f"Provides-Extra: {extra}" for extra in extras]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    writer.add(f"{info}/METADATA", ("\n".join(lines) + "\n").encode())
    if entry_points:
        writer.add(f"{info}/entry_points.txt", entry_points.encode())
    purelib = "true" if tag == "py3-none-any" else "false"
    writer.add(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: tatolab\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode())
    return writer.close()


def pack_sdk(out_dir: Path) -> list[Path]:
    """Wheels of this tatolab and everything it needs to run (not its extras), from this environment."""
    wheels = [pack_tatolab(out_dir)]
    seen = {"tatolab"}
    try:
        todo = runtime_requirements(metadata.distribution("tatolab"))
    except metadata.PackageNotFoundError:
        todo = ["msgspec"]
    while todo:
        name = todo.pop()
        if normalized(name) in seen:
            continue
        seen.add(normalized(name))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise WheelError(f"{name}, which tatolab needs, is not installed beside the runtime; reinstall tatolab") from None
        wheels.append(pack_installed(name, out_dir))
        todo.extend(runtime_requirements(dist))
    return wheels
