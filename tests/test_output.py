"""Output files written safely (``pyclassify.output``), as ``replay`` writes ``--out``, ``--allowed``
and ``--denied``: in place only when the run succeeds, never through a symbolic link unless asked."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pyclassify.output import OutputFile, SymlinkRefused

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
PCAP = str(REPO / "pcaps" / "demo.pcap")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_an_unreadable_capture_leaves_earlier_outputs_as_they_were(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all, and long enough to be read as one" * 4)
    outputs = {name: tmp_path / name for name in ("out.jsonl", "allowed.pcap", "denied.pcap")}
    for path in outputs.values():
        path.write_text("an earlier run's output\n")
    r = cli(
        "replay",
        DEMO,
        "--pcap",
        PCAP,
        "--pcap",
        str(bad),
        "--out",
        str(outputs["out.jsonl"]),
        "--allowed",
        str(outputs["allowed.pcap"]),
        "--denied",
        str(outputs["denied.pcap"]),
    )
    assert r.returncode == 1, r.stderr
    for path in outputs.values():
        assert path.read_text() == "an earlier run's output\n", path
    assert leftovers(tmp_path) == []


def test_a_successful_run_replaces_the_outputs_whole(tmp_path: Path) -> None:
    out, allowed = tmp_path / "out.jsonl", tmp_path / "allowed.pcap"
    out.write_text("stale\n" * 1000)
    os.chmod(out, 0o640)
    r = cli("replay", DEMO, "--pcap", PCAP, "--out", str(out), "--allowed", str(allowed), "--json")
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == json.loads(r.stdout)["packets"] and all(
        json.loads(x)["index"] == i for i, x in enumerate(lines)
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o640  # a replaced file keeps its permissions
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(allowed.stat().st_mode) == 0o666 & ~umask  # a new one: as open() makes it
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("option", ["--out", "--allowed", "--denied"])
def test_an_output_through_a_link_is_refused(tmp_path: Path, option: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    link = tmp_path / "verdicts"
    link.symlink_to(victim)
    r = cli("replay", DEMO, "--pcap", PCAP, option, str(link))
    assert r.returncode == 2, r.stderr
    assert "is a symbolic link" in r.stderr and "--follow-symlinks" in r.stderr
    assert victim.read_text() == "someone else's file\n" and link.is_symlink()
    # asked: the file the link points to is replaced, the link stays
    r = cli("replay", DEMO, "--pcap", PCAP, option, str(link), "--follow-symlinks")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and victim.read_bytes() != b"someone else's file\n"
    assert leftovers(tmp_path) == []


def test_a_device_is_written_as_a_stream(tmp_path: Path) -> None:
    r = cli("replay", DEMO, "--pcap", PCAP, "--out", "/dev/null")
    assert r.returncode == 0, r.stderr
    r = cli("replay", DEMO, "--pcap", PCAP, "--out", "/dev/full")
    assert r.returncode == 1 and "--out /dev/full: cannot write" in r.stderr


def test_output_file_commit_and_discard(tmp_path: Path) -> None:
    target = tmp_path / "x.txt"
    target.write_text("old")
    f = OutputFile("--out", str(target), binary=False)
    f.file.write("new")
    assert target.read_text() == "old"  # nothing in place before the commit
    f.discard()
    assert target.read_text() == "old" and leftovers(tmp_path) == []
    f = OutputFile("--out", str(target), binary=False)
    f.file.write("new")
    f.commit()
    assert target.read_text() == "new" and leftovers(tmp_path) == []
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SymlinkRefused):
        OutputFile("--out", str(dangling), binary=True)
