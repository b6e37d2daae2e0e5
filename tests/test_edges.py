"""The edges a new user hits (issue 18): ordinary mistakes and hostile input get a clear error,
an ASCII fallback or a refusal — never a traceback, a crash, lost data or silent acceptance.

Each test runs the command as a user runs it (a subprocess) unless it needs to reach inside."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
PCAP = REPO / "pcaps" / "demo.pcap"
PYCLASSIFY = [sys.executable, "-m", "pyclassify"]


def run(
    *args: str | bytes, env: dict[str, str] | None = None, cwd: str | Path | None = None, input: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PYCLASSIFY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
        cwd=cwd,
        input=input,
        errors="backslashreplace",
    )


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr


# --- 1: an output that is an input is refused before anything is written ----------------------


@pytest.mark.parametrize("option", ["--out", "--allowed", "--denied"])
@pytest.mark.parametrize("through", ["same", "symlink", "hardlink"])
def test_replay_refuses_to_overwrite_its_capture(tmp_path, option, through):
    capture = tmp_path / "same.pcap"
    capture.write_bytes(PCAP.read_bytes())
    target = capture
    if through == "symlink":
        target = tmp_path / "link.pcap"
        target.symlink_to(capture)
    elif through == "hardlink":
        target = tmp_path / "hard.pcap"
        os.link(capture, target)
    r = run("replay", DEMO, "--pcap", str(capture), option, str(target))
    no_traceback(r)
    assert r.returncode == 2, r.stderr
    assert "same file" in r.stderr and option in r.stderr
    assert capture.read_bytes() == PCAP.read_bytes()  # untouched


def test_replay_refuses_a_manifest_as_output_and_two_outputs_in_one_file(tmp_path):
    manifests = tmp_path / "m"
    manifests.mkdir()
    policy = manifests / "demo.yaml"
    text = "\n---\n".join(p.read_text() for p in sorted(Path(DEMO).glob("*.yaml")))
    policy.write_text(text)
    r = run("replay", str(manifests), "--pcap", str(PCAP), "--out", str(policy))
    assert r.returncode == 2 and "same file" in r.stderr
    assert policy.read_text() == text
    r = run("replay", DEMO, "--pcap", str(PCAP), "--out", str(tmp_path / "o"), "--denied", str(tmp_path / "o"))
    assert r.returncode == 2 and "same file" in r.stderr


# --- 5: an --out that cannot be opened --------------------------------------------------------


def test_replay_out_that_cannot_be_opened_is_a_clean_error(tmp_path):
    r = run("replay", DEMO, "--pcap", str(PCAP), "--out", str(tmp_path / "no" / "such" / "dir.jsonl"))
    no_traceback(r)
    assert r.returncode == 1 and "--out" in r.stderr and "No such file or directory" in r.stderr


# --- 3, 15: selectors with lone surrogates, and long ones, in manifests ------------------------


def _gnp(selector: str) -> str:
    doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": "p"},
        "spec": {"selector": selector, "types": ["Ingress"]},
    }
    return json.dumps(doc, indent=1)  # ensure_ascii: a lone surrogate becomes a \udcff escape


def test_selector_with_a_lone_surrogate_is_a_file_line_error():
    # The manifest reader turns a \udcff escape into U+FFFD, but objects from the Kubernetes API
    # and AdmissionReview bodies are read with json.loads, which keeps the lone surrogate.
    from pyclassify.admission.policy import check_admission_documents
    from pyclassify.documents import Document, Problems
    from pyclassify.project import build_project

    gnp = json.loads(_gnp('app == "w\udcffb"'))
    cap = json.loads(
        json.dumps(
            {
                "apiVersion": "containersecurity.tigera.io/v1beta1",
                "kind": "ContainerAdmissionPolicy",
                "metadata": {"name": "p"},
                "spec": {
                    "selector": 'app == "w\udcffb"',
                    "order": 1,
                    "rules": [{"action": "Allow", "imagePath": {"operator": "IsOneOf", "values": ["x"]}}],
                },
            }
        )
    )
    assert "\udcff" in gnp["spec"]["selector"] and "\udcff" in cap["spec"]["selector"]
    problems = Problems()
    project = build_project([Document(gnp, "watch", 3), Document(cap, "watch", 9)], problems)
    check_admission_documents(project.admission_documents, problems)
    errors = [str(p) for p in problems.errors]
    assert any(e.startswith("watch:3: spec.selector: invalid selector") and "UTF-8" in e for e in errors), errors
    assert any(e.startswith("watch:9: spec.selector: invalid selector") and "UTF-8" in e for e in errors), errors


def test_check_shows_a_window_of_a_long_invalid_selector(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(_gnp("a == 'b' && " + "x" * 1_000_000 + " &&"))
    r = run("check", str(f))
    no_traceback(r)
    assert r.returncode == 1 and "invalid selector" in r.stderr
    assert len(r.stderr) < 2000, len(r.stderr)


# --- 4: bytes that are not UTF-8 on the command line ------------------------------------------


def test_non_utf8_arguments_are_usage_errors():
    for args in (
        [b"selector", b"a == '\xff'"],
        [b"selector", b"has(a)", b"--labels", b"a=\xff"],
        [b"explain", DEMO.encode(), b"--from", b"\xff/x", b"--to", b"backend/api"],
    ):
        r = subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, timeout=120)
        stderr = r.stderr.decode("utf-8", "replace")
        assert "Traceback" not in stderr, stderr
        assert r.returncode == 2 and "UTF-8" in stderr


def test_repeated_label_is_a_usage_error():
    r = run("selector", "a == 'b'", "--labels", "a=b,a=c")
    assert r.returncode == 2 and "twice" in r.stderr


# --- 6: a stdout that cannot show the symbols --------------------------------------------------


@pytest.mark.parametrize(
    "env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}]
)
def test_ascii_stdout_gets_ascii_forms(env):
    for args in (
        ("matrix", DEMO, "--port", "80"),
        ("check", DEMO),
        ("replay", DEMO, "--pcap", str(PCAP)),
        ("selector", "a == 'b' && " + "x" * 200 + " =="),
    ):
        r = subprocess.run([*PYCLASSIFY, *args], capture_output=True, timeout=120, env={**os.environ, **env})
        assert b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
        assert r.returncode in (0, 1), r.stderr
        r.stdout.decode("ascii")  # nothing but ASCII
        r.stderr.decode("ascii")


# --- 7: Ctrl-C: the verdict file holds exactly what the summary counts -------------------------


def test_interrupt_while_writing_keeps_file_and_summary_in_agreement(tmp_path):
    from pyclassify.engine import NativeEngine
    from pyclassify.project import load_project
    from pyclassify.replay import Replay

    class InterruptedOut:
        """--out whose tenth line arrives with a Ctrl-C."""

        def __init__(self) -> None:
            self.lines: list[str] = []

        def write(self, text: str) -> int:
            self.lines.append(text)
            if len(self.lines) == 10:
                os.kill(os.getpid(), signal.SIGINT)
            return len(text)

    project = load_project([DEMO])
    out = InterruptedOut()
    replay = Replay(NativeEngine(project.policy_set, project.inventory), out=out)  # type: ignore[arg-type]
    # As at a terminal: a shell that starts the suite in the background (`cmd &`) hands it
    # SIGINT ignored, and Python then keeps it ignored.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        summary = replay.run([str(PCAP), str(PCAP)])
    finally:
        after = signal.signal(signal.SIGINT, inherited)
    assert summary.interrupted
    assert summary.packets == len(out.lines) == 48  # the first capture, whole; not the second
    assert after is signal.default_int_handler  # replay put back the handler it found


# --- 17: the replay summary adds up -----------------------------------------------------------


def test_replay_summary_numbers_add_up():
    r = run("replay", DEMO, "--pcap", str(PCAP), "--json")
    s = json.loads(r.stdout)
    assert s["policy"] + s["established"] + s["denied_connection"] + s["invalid"] + s["malformed"] == s["packets"]
    for direction in ("egress", "ingress"):
        listed = sum(row["packets"] for row in s["by_rule"] if row["direction"] == direction)
        assert listed + s["no_policy"][direction] == s["policy"]
    text = run("replay", DEMO, "--pcap", str(PCAP)).stdout
    lines = text.splitlines()
    counts = [int(line.split()[0]) for line in lines[1:6]]
    assert sum(counts) == s["packets"], text
    assert "by connection tracking" in lines[2] and "denied" not in lines[2]
    for direction in ("egress", "ingress"):
        rows = [line for line in lines[7:] if line.split()[1:2] == [direction]]
        assert sum(int(line.split()[0]) for line in rows) == s["policy"], text


def test_replay_summary_without_policy_decisions_says_so(tmp_path):
    empty = tmp_path / "ns.yaml"
    empty.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    r = run("replay", str(empty), "--pcap", str(PCAP), "--no-conntrack")
    assert r.returncode == 0, r.stderr
    assert "decided by policy:\n" not in r.stdout


# --- 18: explain's arguments ------------------------------------------------------------------


def test_explain_prints_protocol_names_and_refuses_fields_the_protocol_lacks():
    r = run("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", "--proto", "6", "--port", "8080")
    assert r.returncode == 0 and "TCP/8080" in r.stdout
    for args in (
        ("--proto", "TCP", "--icmp-type", "8"),
        ("--proto", "ICMP", "--port", "80"),
        ("--proto", "ICMP", "--icmp-code", "0"),
    ):
        r = run("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", *args)
        assert r.returncode == 2, (args, r.stdout)


def test_help_documents_arguments_and_ends_with_examples():
    h = run("explain", "--help").stdout
    assert "ns/Kind/name" in h and "without a port" in h
    assert "ICMP/ICMPv6 type" in h and "ICMP/ICMPv6 code" in h
    commands = [
        "selector",
        "check",
        "explain",
        "matrix",
        "replay",
        "render",
        "enforce",
        "monitor",
        "admit",
        "admission-webhook",
    ]
    for command in commands:
        r = run(command, "--help")
        assert r.returncode == 0, r.stderr
        tail = r.stdout.rstrip().split("Examples:")
        assert len(tail) == 2, (command, r.stdout)
        assert f"pyclassify {command}" in tail[1] and "Options:" not in tail[1], command


# --- 19: monitor shows control bytes escaped ---------------------------------------------------


def test_monitor_escapes_control_bytes(tmp_path):
    event = {
        "event": "deny",
        "ts": 1.0,
        "src": "10.0.0.1",
        "dst": "10.0.0.2",
        "proto": "TCP",
        "dport": 80,
        "src_endpoint": "ns/\x1b[2J\x1b]0;owned\x07pod\r",
        "ingress": {"verdict": "deny", "policy": "p\u202eevil"},
    }
    f = tmp_path / "events.jsonl"
    f.write_text(json.dumps(event) + "\n" + "not json \x1b[31m\n")
    r = run("monitor", str(f))
    assert r.returncode == 0, r.stderr
    for text in (r.stdout, r.stderr):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text
    assert "\\x1b[2J" in r.stdout and "\\u202e" in r.stdout and "\\x1b[31m" in r.stderr


# --- 20: enforce --help says what it does to the machine ---------------------------------------


def test_enforce_help_says_what_it_needs_and_touches():
    h = " ".join(run("enforce", "--help").stdout.split())
    assert "root" in h and "CAP_NET_ADMIN" in h
    assert "ip6tables" in h and "filter table" in h
    assert "promiscuous" in h


# --- 10: directory links are followed, loops and dangling links reported -----------------------

NP = """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: {name}, namespace: default}}
spec: {{podSelector: {{}}, policyTypes: [Ingress]}}
"""


def test_symlinked_directories_are_followed_once_and_dangling_links_reported(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "np.yaml").write_text(NP.format(name="a"))
    top = tmp_path / "top"
    top.mkdir()
    (top / "linkdir").symlink_to(real, target_is_directory=True)
    (real / "loop").symlink_to(top, target_is_directory=True)  # top/linkdir/loop -> top
    (top / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    r = run("check", str(top), "--json")
    no_traceback(r)
    doc = json.loads(r.stdout)
    assert doc["documents"] == 1 and doc["policies"] == 1, doc
    warnings = " ".join(w["message"] for w in doc["warnings"])
    assert "dangling link" in warnings and "not read again" in warnings
    assert any(w["file"] == str(top / "gone.yaml") for w in doc["warnings"])


# --- 11: nothing found is not "valid" -----------------------------------------------------------


def test_a_path_without_manifests_warns_and_exits_1(tmp_path):
    (tmp_path / "README.txt").write_text("not a manifest")
    comments = tmp_path / "c.yaml"
    comments.write_text("# nothing here\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (empty, comments):
        r = run("check", str(target))
        no_traceback(r)
        assert r.returncode == 1 and "warning" in r.stderr and str(target) in r.stderr, r.stderr
        assert "valid" not in r.stdout.split(",")[0]
    r = run("explain", str(empty), "--from", "10.0.0.1", "--to", "10.0.0.2")
    assert r.returncode == 1 and "nothing to read" in r.stderr
    # A path with manifests beside an empty one: the run still says so.
    r = run("check", DEMO, str(empty))
    assert r.returncode == 1


# --- 12: near-miss kinds and unknown versions of known groups -----------------------------------


def test_misspelt_kinds_and_unknown_versions_are_errors(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(
        NP.format(name="a").replace("kind: NetworkPolicy", "kind: NetworkPolicys")
        + "---\n"
        + NP.format(name="b").replace("networking.k8s.io/v1", "networking.k8s.io/v2")
        + "---\n"
        + "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolcy\nmetadata: {name: c}\n---\n"
        + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n"
    )
    r = run("check", str(f), "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["policies"] == 0
    errors = {(e["line"], e["path"]): e["message"] for e in doc["errors"]}
    assert "did you mean NetworkPolicy" in errors[(2, "kind")]
    assert "unknown version 'networking.k8s.io/v2'" in errors[(6, "apiVersion")]
    assert "did you mean GlobalNetworkPolicy" in errors[(12, "kind")]
    assert len(errors) == 3 and doc["skipped"] == {"v1/ConfigMap": 1}


# --- 13: the same object in two files -----------------------------------------------------------


def test_duplicates_across_files_name_both_places(tmp_path):
    (tmp_path / "a.yaml").write_text(NP.format(name="same"))
    (tmp_path / "b.yaml").write_text("# the same again\n" + NP.format(name="same"))
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: []}\n"
    (tmp_path / "c.yaml").write_text(pod)
    (tmp_path / "d.yaml").write_text(pod)
    r = run("check", str(tmp_path))
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if "duplicate" in line]
    assert any(
        line.startswith(f"{tmp_path / 'b.yaml'}:4:") and f"{tmp_path / 'a.yaml'}:3" in line for line in errors
    ), errors
    assert any(line.startswith(f"{tmp_path / 'd.yaml'}:") and str(tmp_path / "c.yaml") in line for line in errors), (
        errors
    )


# --- 14: corrupt captures exit 1, with real offsets and the file named once --------------------


def _pcap_header(version: int = 2, linktype: int = 1) -> bytes:
    import struct

    return struct.pack("<IHHiIII", 0xA1B2C3D4, version, 4, 0, 0, 65535, linktype)


def test_corrupt_captures_exit_1_with_real_offsets(tmp_path):
    import struct

    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    idb = struct.pack("<IIHHII", 1, 20, 1, 0, 65535, 20)
    cases = {
        "impossible-block.pcapng": (shb + idb + struct.pack("<II", 6, 0xFFFFFFF0) + b"\0" * 64, "offset 48"),
        "version.pcap": (_pcap_header(version=9) + b"\0" * 40, "version 9.4"),
        "linktype.pcap": (_pcap_header(linktype=4242) + struct.pack("<IIII", 0, 0, 4, 4) + b"abcd", "link type 4242"),
    }
    for name, (data, said) in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        for stdin in (False, True):
            if stdin:
                r = subprocess.run(
                    [*PYCLASSIFY, "replay", DEMO, "--pcap", "-"], input=data, capture_output=True, timeout=120
                )
                out = (r.stdout + r.stderr).decode()
            else:
                r = run("replay", DEMO, "--pcap", str(f))
                out = r.stdout + r.stderr
            assert "Traceback" not in out
            assert r.returncode == 1, (name, out)
            assert said in out, (name, out)
            if not stdin:
                assert out.count(name) == out.count(str(f)) >= 1 and f"{f}: {f}" not in out, out


# --- 2: a capture truncated underneath is a reported truncation, not a Bus error ---------------

TRUNCATE = r"""
import sys
from pyclassify import cli, engine
capture = sys.argv[1]
real = engine.NativeEngine.judge_lanes
calls = []
def judge(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 1:
        with open(capture, "r+b") as f:  # another process cuts the capture after the first batch
            f.truncate(4096)
    return real(self, *args, **kwargs)
engine.NativeEngine.judge_lanes = judge
cli.main(sys.argv[2:])
"""


def test_capture_truncated_during_replay_is_reported(tmp_path):
    import struct

    from pyclassify.capture import read_all

    frame = bytes.fromhex("ffffffffffff00000000000108004500001c000100004011f97b0a00010a0a000214") + b"\0" * 8
    frame = frame[:14] + frame[14:34] + b"\x30\x39\x00\x35\x00\x08\x00\x00"
    packets = 70_000  # more than one batch (65,536)
    record = b"".join(struct.pack("<IIII", i // 1000, i % 1000, len(frame), len(frame)) + frame for i in range(packets))
    capture = tmp_path / "big.pcap"
    capture.write_bytes(_pcap_header() + record)
    allowed, out = tmp_path / "allowed.pcap", tmp_path / "out.jsonl"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            TRUNCATE,
            str(capture),
            "replay",
            DEMO,
            "--pcap",
            str(capture),
            "--allowed",
            str(allowed),
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # the summary of what was read, and a failure: the packets after the cut are missing
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "truncated or changed while it was read" in r.stderr
    summary = json.loads(r.stdout)
    assert any("truncated while being read" in p for p in summary["problems"]), summary["problems"]
    assert summary["cut_short"] == [str(capture)]
    assert 0 < summary["packets"] <= packets
    assert len(out.read_text().splitlines()) == summary["packets"]
    headers, _, cap = read_all(str(allowed))
    assert len(headers) == summary["allowed"] and not cap.problems


# --- 21: a manifest larger than the bound is rejected before it is read -------------------------


def test_manifest_size_is_bounded(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  k: " + "a" * 5000 + "\n")
    r = run("check", str(big), env={"PYCLASSIFY_MAX_MANIFEST_BYTES": "4096"})
    assert r.returncode == 1 and "larger than the limit of 4096 bytes" in r.stderr, r.stderr
    r = run("check", "-", env={"PYCLASSIFY_MAX_MANIFEST_BYTES": "4096"}, input=big.read_text())
    assert r.returncode == 1 and "<stdin>" in r.stderr and "larger than the limit" in r.stderr
    assert run("check", str(big)).returncode == 0
    from pyclassify.loader import DEFAULT_MAX_MANIFEST_BYTES

    assert DEFAULT_MAX_MANIFEST_BYTES < 50 * 1024 * 1024 * 10


# --- 16: demo.sh says what it waits for, and prints its commands as one would type them ---------

SCRIPTS = REPO / "scripts"


def test_demo_prints_commands_with_their_quotes(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", str(SCRIPTS / "demo.sh"), "--installed"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "\n$ pyclassify selector \"a == 'b' && has(c)\" --labels a=b,c=1\n" in r.stdout
    # Whatever the argument, the printed form is read back by the shell as that argument.
    text = (SCRIPTS / "demo.sh").read_text()
    quote = text[text.index("quote() {") : text.index("\n}\n", text.index("quote() {")) + 3]
    tricky = ["plain", "a b", "a == 'b'", 'say "hi"', "$HOME `x` \\ !", 'it\'s "both"', "", "*"]
    for arg in tricky:
        script = quote + 'eval "set -- $(quote "$1")"; printf "%s" "$1"'
        back = subprocess.run(["bash", "-c", script, "bash", arg], capture_output=True, text=True, timeout=60)
        assert back.stdout == arg, (arg, back.stdout, back.stderr)


def test_venv_script_says_what_it_waits_for_and_shows_pips_progress(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "venv.sh").write_text((SCRIPTS / "venv.sh").read_text())
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "python"  # records how pip would be run
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/pip-args\n')
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", "-c", f"source {tmp_path}/scripts/venv.sh test"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "minutes" in r.stdout and "Rust" in r.stdout
    args = (tmp_path / "pip-args").read_text().split()
    assert args[:3] == ["-m", "pip", "install"] and "-q" not in args and "--quiet" not in args


def test_an_object_larger_than_any_cluster_takes_is_rejected_before_the_slow_reader(tmp_path):
    # %YAML 1.1 sends the document to the ruamel reader (~2 MB/s): the bound stops it first.
    big = tmp_path / "big.yaml"
    big.write_text(
        "%YAML 1.1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  k: " + "a" * 4_000_000 + "\n"
    )
    r = run("check", str(big))
    assert r.returncode == 1 and "larger than the limit of 3145728 bytes" in r.stderr, r.stderr
    assert run("check", str(big), env={"PYCLASSIFY_MAX_OBJECT_BYTES": "5000000"}).returncode == 0
    # One List item too large is rejected alone; the other items load.
    items = ",".join(
        [
            '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}',
            '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "%s"}}' % ("a" * 2000),
        ]
    )
    lst = tmp_path / "list.json"
    lst.write_text(f'{{"apiVersion": "v1", "kind": "List", "items": [{items}]}}')
    doc = json.loads(run("check", str(lst), "--json", env={"PYCLASSIFY_MAX_OBJECT_BYTES": "1000"}).stdout)
    assert doc["documents"] == 1 and len(doc["errors"]) == 1 and "larger than the limit" in doc["errors"][0]["message"]
