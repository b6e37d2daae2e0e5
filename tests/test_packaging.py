"""What a wheel of the checkout contains, checked without building one.

pyproject.toml finds the packages (`[tool.setuptools.packages.find]`, regular packages only) and
ships the stubs and py.typed as package data. A directory of modules without an __init__.py, or a
data file no pattern covers, would be left out of the wheel while every in-tree test still passes.
`.ci/run` builds and installs the real wheel (scripts/install_check.sh); this is the quick check.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pyclassify"
pytestmark = pytest.mark.skipif(not (REPO / "pyproject.toml").is_file(), reason="needs the source tree")

BUILD_OUTPUT = ("*.so", "*.pyc", "*.c", "*.html")


def setuptools_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_packages_are_found_not_listed() -> None:
    packages = setuptools_config()["packages"]
    assert isinstance(packages, dict), "list no packages by hand: a new subpackage would be left out"
    find = packages["find"]
    assert find["include"] == ["pyclassify*"]
    assert find.get("namespaces") is False


def test_every_directory_of_modules_is_a_regular_package() -> None:
    for directory in sorted({p.parent for p in PACKAGE.rglob("*.py")}):
        if "__pycache__" in directory.parts:
            continue
        assert (directory / "__init__.py").is_file(), (
            f"{directory.relative_to(REPO)} has modules but no __init__.py: the wheel would leave it out"
        )


def test_every_data_file_is_package_data() -> None:
    data = setuptools_config()["package-data"]
    # "*": a pattern of file names in every package; "pyclassify": paths below the package
    names = data["*"]
    paths = data.get("pyclassify", [])
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".py":
            continue
        if any(fnmatch.fnmatch(path.name, p) for p in BUILD_OUTPUT):
            continue
        below = path.relative_to(PACKAGE).as_posix()
        assert any(fnmatch.fnmatch(path.name, p) for p in names) or any(fnmatch.fnmatch(below, p) for p in paths), (
            f"{path.relative_to(REPO)} matches no package-data pattern of pyproject.toml: the wheel would leave it out"
        )
    assert {"py.typed", "_engine.pyi", "_native.pyi"} <= {p.name for p in PACKAGE.iterdir()}


def test_the_image_installs_the_wheel_and_runs_no_fetched_script() -> None:
    """deploy/Containerfile copies the wheel built beforehand (dist/) and deploy/image/, whose
    install.sh installs Debian's packages and the wheel: nothing is fetched and piped to a shell
    (no curl | sh), and nothing else is copied. The image itself is built and run by
    tests/kube/test_image.py (scripts/build-image.sh, the same install.sh)."""
    text = (REPO / "deploy" / "Containerfile").read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    script = (REPO / "deploy" / "image" / "install.sh").read_text()
    script_lines = [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    copied = set()
    for line in lines + script_lines:
        parts = line.split()
        if parts[:1] == ["COPY"]:
            copied |= {p.rstrip("/") for p in parts[1:-1]}
        assert "curl" not in parts and "wget" not in parts, line
        assert not any(p in ("sh", "bash") and i and parts[i - 1].endswith("|") for i, p in enumerate(parts)), line
    assert copied == {"dist", "deploy/image"}
    assert any("apt-get install" in line for line in script_lines)
    assert "iptables" in (REPO / "deploy" / "image" / "packages.txt").read_text().split()
    assert any("pip install" in line for line in script_lines) and '"$wheels"/pyclassify-*.whl' in script


def test_the_dask_worker_image_and_group_run_this_wheel_with_the_dask_extra() -> None:
    """deploy/dask/Containerfile installs the wheel built beforehand with the dask extra and
    nothing fetched by hand; the worker group runs that image, one thread a worker, with the
    archive mounted read-only; both name the version pyproject.toml gives."""
    import tomllib

    import yaml

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    text = (REPO / "deploy" / "dask" / "Containerfile").read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert {p.rstrip("/") for line in lines if line.split()[:1] == ["COPY"] for p in line.split()[1:-1]} == {"dist"}
    assert not any(w in line.split() for line in lines for w in ("curl", "wget"))
    assert any("pip install" in line and "[dask" in line and "/wheels/pyclassify-" in line for line in lines)
    assert 'ENTRYPOINT ["dask", "worker"]' in lines
    assert f"pyclassify-dask-worker:{version}" in text
    group = yaml.safe_load((REPO / "deploy" / "dask" / "daskworkergroup.yaml").read_text())
    assert (group["apiVersion"], group["kind"]) == ("kubernetes.dask.org/v1", "DaskWorkerGroup")
    pod = group["spec"]["worker"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == f"ghcr.io/pyclassify/pyclassify-dask-worker:{version}"
    args = container["args"]
    assert args[args.index("--nthreads") + 1] == "1"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["archive"]["readOnly"] is True
    assert {v["name"] for v in pod["volumes"]} >= set(mounts)
