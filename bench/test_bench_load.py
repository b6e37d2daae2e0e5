"""Loading manifests at input speed (issue 11, item 2).

A cluster of 1k and 10k pods (``bench.cluster``: n pods, n/100 namespaces, n/10 NetworkPolicies,
ANPs, a BANP and a Calico tier, as kubectl prints them) is written as multi-document YAML
(``kubectl get -o yaml`` per object), as one indented JSON ``List`` (``kubectl get -o json``)
and as single-line JSON. Each
is loaded by ``pyclassify.loader.iter_file`` (every document handed out and dropped, as
``load_project`` does) and, in the same run, by the baselines: PyYAML's C loader
(``yaml.load_all(..., Loader=yaml.CSafeLoader)``) for YAML, ``json.loads`` for JSON, and the
old pure-Python ruamel.yaml path on a 100-pod YAML (it is too slow at scale). Each prints MB/s;
``test_ratios`` prints the ratios. ``test_peak_rss`` measures the peak resident memory of a
process loading the 10k YAML, streaming and keeping every document.

    .venv/bin/python -m pytest bench/test_bench_load.py -s --benchmark-columns=min,median,rounds \\
        --benchmark-timer=time.process_time
    PYCLASSIFY_LOAD_SIZES=1000,10000,100000 .venv/bin/python -m pytest bench/test_bench_load.py ...  # and 100k
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.cluster import generate, write_json_compact, write_json_list, write_yaml
from pyclassify import loader_ruamel
from pyclassify.documents import Problems
from pyclassify.loader import iter_file

yaml = pytest.importorskip("yaml")

# PYCLASSIFY_LOAD_SIZES=1000,10000,100000 adds 100k pods (its files take about a minute to write).
SIZES = tuple(int(n) for n in os.environ.get("PYCLASSIFY_LOAD_SIZES", "1000,10000").split(","))
FORMS = ("yaml", "json-indented", "json-line")
RESULTS: dict[tuple[str, int, str], float] = {}  # (form, pods, loader) -> MB/s (best round)
OBJECTS: dict[int, int] = {}  # pods -> objects in the generated cluster


@pytest.fixture(scope="module")
def cluster_files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    out = tmp_path_factory.mktemp("clusters")
    files: dict[tuple[str, int], Path] = {}
    for pods in sorted({100, 10000, *SIZES}):
        cluster = generate(pods, seed=1)
        OBJECTS[pods] = len(cluster.objects())
        files["yaml", pods] = write_yaml(cluster, out / f"cluster-{pods}.yaml")
        files["json-indented", pods] = write_json_list(cluster, out / f"cluster-{pods}.json")
        files["json-line", pods] = write_json_compact(cluster, out / f"cluster-{pods}-line.json")
    for f in files.values():
        f.read_bytes()  # in the page cache
    return files


def pyclassify_load(path: Path) -> int:
    problems = Problems()
    n = sum(1 for _ in iter_file(path, problems))
    assert not problems.items
    return n


def pyyaml_c_load(path: Path) -> int:
    with open(path, "rb") as f:
        return len(list(yaml.load_all(f, Loader=yaml.CSafeLoader)))


def json_load(path: Path) -> int:
    return len(json.loads(path.read_bytes())["items"])


def ruamel_load(path: Path) -> int:
    return len(list(loader_ruamel.parse_yaml(path.read_text())))


def report(key: tuple[str, int, str], benchmark: object, path: Path) -> None:
    stats = benchmark.stats.stats  # type: ignore[attr-defined]
    mb = path.stat().st_size / 1e6
    RESULTS[key] = mb / stats.min
    form, pods, loader = key
    print(
        f"\n{loader} {form} {pods} pods ({mb:.1f} MB): {RESULTS[key]:.1f} MB/s, {stats.min:.3f} s (best of {stats.rounds})"
    )


@pytest.mark.parametrize("pods", SIZES)
@pytest.mark.parametrize("form", FORMS)
def test_load_pyclassify(benchmark: object, cluster_files: dict, form: str, pods: int) -> None:
    path = cluster_files[form, pods]
    n = benchmark.pedantic(pyclassify_load, args=(path,), rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert n == OBJECTS[pods]
    report((form, pods, "pyclassify"), benchmark, path)


@pytest.mark.parametrize("pods", SIZES)
@pytest.mark.parametrize("form", FORMS)
def test_load_baseline(benchmark: object, cluster_files: dict, form: str, pods: int) -> None:
    path = cluster_files[form, pods]
    fn: Callable[[Path], int] = pyyaml_c_load if form == "yaml" else json_load
    rounds = 1 if form == "yaml" else 3
    benchmark.pedantic(fn, args=(path,), rounds=rounds, iterations=1)  # type: ignore[attr-defined]
    report((form, pods, "PyYAML C" if form == "yaml" else "json.loads"), benchmark, path)


@pytest.mark.parametrize("loader", ["pyclassify", "ruamel (old path)"])
def test_load_small_yaml_against_the_old_path(benchmark: object, cluster_files: dict, loader: str) -> None:
    path = cluster_files["yaml", 100]
    fn = pyclassify_load if loader == "pyclassify" else ruamel_load
    benchmark.pedantic(fn, args=(path,), rounds=1, iterations=1)  # type: ignore[attr-defined]
    report(("yaml", 100, loader), benchmark, path)


def test_ratios() -> None:
    if not RESULTS:
        pytest.skip("run with the loading benchmarks")
    for (form, pods, loader), rate in sorted(RESULTS.items()):
        if loader == "pyclassify":
            continue
        ours = RESULTS.get((form, pods, "pyclassify"))
        if ours:
            print(f"\n{form} {pods} pods: pyclassify {ours:.1f} MB/s = {ours / rate:.2f}x {loader} ({rate:.1f} MB/s)")
    print(f"(measured {time.strftime('%Y-%m-%d')}, same files, same run)")


# Peak RSS from VmHWM: ru_maxrss of a child of this (big) process starts at the parent's size.
RSS_SCRIPT = """
import re, sys
from pathlib import Path
from pyclassify.loader import iter_file
from pyclassify.documents import Problems
mode, path = sys.argv[1], Path(sys.argv[2])
if mode == "stream":
    n = sum(1 for _ in iter_file(path, Problems()))
elif mode == "keep":
    n = len(list(iter_file(path, Problems())))
elif mode == "pyyaml":
    import yaml
    n = len(list(yaml.load_all(path.read_bytes(), Loader=yaml.CSafeLoader)))
else:
    n = 0
peak_kb = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print(n, peak_kb // 1024)
"""


def test_peak_rss(cluster_files: dict) -> None:
    path = cluster_files["yaml", 10000]
    for mode, what in [
        ("none", "interpreter + imports"),
        ("stream", "streamed, each document dropped"),
        ("keep", "every document kept (load_paths)"),
        ("pyyaml", "PyYAML C loader, whole file"),
    ]:
        out = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, mode, str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.split()
        print(f"\npeak RSS loading {path.stat().st_size / 1e6:.1f} MB of YAML (10k pods), {what}: {out[1]} MB")
