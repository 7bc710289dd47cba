"""Wheels of modula-sweep's dependencies for a GPU node without internet access.

Reads modula-sweep's requirements (with --extras) from pyproject.toml, walks their dependency tree as
installed in this environment (install the project here first: pip install -e ".[dev]") and fetches a
wheel of each package at the version installed here, for the target Python and platform, into one folder.
PyTorch and its CUDA stack (torch, torchvision, triton, nvidia-*, cuda-*) are left out: GPU machines bring
their own. Packages published only as source (antlr4-python3-runtime) are built into pure-Python wheels.

    # on the GPU node: python3 -m pip freeze > present.txt; copy present.txt here, then
    python scripts/offline_wheels.py --python-version 3.12 --out .whl --skip-present present.txt
    # on the GPU node again (its python3 holding torch), with .whl copied beside the repository:
    python3 -m pip install --no-index --no-deps .whl/*.whl && python3 -m pip install --no-deps --no-build-isolation -e .

``--skip-present FILE`` leaves out the packages the node already has, keeping the folder small: FILE names
them one per line or space-separated, as ``pip freeze`` (``name==version``) or a plain list of names. A
package the node has at an older version than this environment's is fetched anyway (datasets, for one,
needs a recent huggingface-hub). ``--list`` prints what would be fetched and fetches nothing.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

CUDA_STACK = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines: list[str], extras: set[str]) -> list[str]:
    """Names of the requirements in ``lines`` that apply here (markers evaluated as pip does), with the
    packages that the requested extras of each (``pkg[extra]``) pull in."""
    names = []
    for line in lines:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""}):
            name = normalize(requirement.name)
            names.append(name)
            if requirement.extras and name in installed():
                names += requirement_names(metadata.requires(name) or [], set(requirement.extras))
    return names


def installed() -> set[str]:
    return {normalize(d.metadata["Name"]) for d in metadata.distributions()}


def project_requirements(extras: set[str]) -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    if unknown := extras - set(optional):
        raise SystemExit(f"--extras {sorted(unknown)}: not in pyproject.toml; allowed: {', '.join(optional)}")
    return list(project["dependencies"]) + [line for extra in sorted(extras) for line in optional[extra]]


def present_packages(text: str) -> dict[str, str | None]:
    """{name: version or None} of the packages a ``--skip-present`` file names: ``pip freeze`` lines
    (``name==version``) or bare names, separated by spaces, commas or lines; '#' starts a comment."""
    present: dict[str, str | None] = {}
    for item in re.split(r"[\s,]+", re.sub(r"#.*", "", text)):
        name, _, version = item.partition("==")
        if name:
            present[normalize(name)] = version or None
    return present


def _already_there(version_here: str, version_there: str | None) -> bool:
    """Whether the node's copy will do: no version given, or at least the version installed here."""
    try:
        return version_there is None or Version(version_there) >= Version(version_here)
    except InvalidVersion:  # a local build's odd version: trust it
        return True


def closure(extras: set[str], present: dict[str, str | None]) -> dict[str, str]:
    """{name: installed version} of every dependency of the project, minus the CUDA stack and the packages
    ``present`` on the offline machine at a version that will do."""
    found: dict[str, str] = {}
    todo = requirement_names(project_requirements(extras), set())
    missing, skipped = [], set()
    while todo:
        name = todo.pop()
        if name in found or name in skipped or CUDA_STACK.match(name):
            continue
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if name in present and _already_there(version, present[name]):
            skipped.add(name)
            continue
        found[name] = version
        todo += requirement_names(metadata.requires(name) or [], set())
    # a requirement this environment lacks: install the project here first, or the wheel folder is incomplete
    direct = {normalize(Requirement(line).name) for line in project_requirements(extras)}
    if absent := sorted(set(missing) & direct):
        raise SystemExit(f"not installed in this environment: {', '.join(absent)}; run pip install -e \".[dev]\" first")
    return found


def fetch(name: str, version: str, out: Path, python_version: str, platforms: list[str]) -> str:
    binary = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(out),
              "--python-version", python_version, "--implementation", "cp",
              *[arg for platform in platforms for arg in ("--platform", platform)], f"{name}=={version}"]
    if subprocess.run(binary, capture_output=True).returncode == 0:
        return "wheel"
    built = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), f"{name}=={version}"]
    result = subprocess.run(built, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{name}=={version}: no wheel for Python {python_version} and no buildable source:\n"
                         f"{result.stderr[-2000:]}")
    return "built"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python-version", default="3.12", help="the offline machine's Python (major.minor)")
    parser.add_argument("--platform", nargs="+", default=["manylinux2014_x86_64", "manylinux_2_28_x86_64"])
    parser.add_argument("--extras", nargs="*", default=["dev"], help="modula-sweep extras to include")
    parser.add_argument("--skip-present", type=Path, help="the offline machine's `pip freeze` (or a list of names)")
    parser.add_argument("--list", action="store_true", help="print the packages (name==version), fetch nothing")
    parser.add_argument("--out", type=Path, default=Path(".whl"))
    args = parser.parse_args()
    present = present_packages(args.skip_present.read_text()) if args.skip_present else {}
    packages = closure(set(args.extras), present)
    if args.list:
        print("\n".join(f"{name}=={version}" for name, version in sorted(packages.items())))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name, version in sorted(packages.items()):
        how = fetch(name, version, args.out, args.python_version, args.platform)
        print(f"{name}=={version}: {how}", flush=True)
    size = sum(f.stat().st_size for f in args.out.glob("*.whl"))
    print(f"{len(packages)} packages, {size / 2**20:.1f} MiB in {args.out}")


if __name__ == "__main__":
    main()
