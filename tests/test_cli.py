"""The ``pyclassify`` command line, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

PYCLASSIFY = [sys.executable, "-m", "pyclassify"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PYCLASSIFY, *args], capture_output=True, text=True, timeout=60)


def test_console_script_is_installed():
    # Installed beside the interpreter that runs the tests (the venv's bin/).
    script = shutil.which("pyclassify", path=str(Path(sys.executable).parent))
    assert script, "the pyclassify console script is not installed beside python"
    r = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "pyclassify" in r.stdout


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and "pyclassify" in r.stdout
    r = run("--help")
    assert r.returncode == 0 and "selector" in r.stdout


def test_selector_match_exits_0():
    r = run("selector", "a == 'b' && has(c)", "--labels", "a=b,c=1")
    assert r.returncode == 0, r.stderr
    assert '(a == "b" && has(c))' in r.stdout


def test_selector_no_match_exits_3():
    r = run("selector", "a == 'b' && has(c)", "--labels", "a=b")
    assert r.returncode == 3


def test_selector_canonical_without_labels():
    r = run("selector", "a in {'z','x'}")
    assert r.returncode == 0 and r.stdout.strip() == 'a in {"x", "z"}'


def test_selector_parse_error_exits_1_with_position():
    r = run("selector", "a == 'b' && %")
    assert r.returncode == 1
    assert "position 12" in r.stderr
    assert r.stderr.splitlines()[-1].index("^") == 2 + 12


def test_selector_json():
    r = run("selector", "a == 'b'", "--labels", "a=b", "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["canonical"] == 'a == "b"' and doc["matches"] is True
    assert doc["restrictions"] == {
        "a": {"must_be_present": True, "must_be_absent": False, "must_have_one_of_values": ["b"]}
    }
    r = run("selector", "a ==", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False


def test_usage_errors_exit_2():
    assert run("selector").returncode == 2
    assert run("selector", "has(a)", "--labels", "oops").returncode == 2
    assert run("no-such-command").returncode == 2


# --- check / explain / matrix on the bundled examples -----------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEMO = str(EXAMPLES / "demo")
BROKEN = str(EXAMPLES / "broken")


def test_check_valid_demo():
    r = run("check", DEMO)
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout and "8 policies" in r.stdout


def test_check_broken_prints_every_error_with_file_and_line():
    r = run("check", BROKEN)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if line.startswith(BROKEN)]
    assert len(lines) == 11
    assert any(":17: spec.egress[0].to[0].ipBlock.cidr:" in line for line in lines)
    assert any(":21: spec.egress[0].to[1].ipBlock.except[0]:" in line and "subset" in line for line in lines)
    doc = json.loads(run("check", BROKEN, "--json").stdout)
    assert doc["valid"] is False and len(doc["errors"]) == 11
    assert {"file", "line", "path", "message"} <= set(doc["errors"][0])


def test_check_reads_stdin():
    text = (EXAMPLES / "broken" / "policies.yaml").read_text()
    r = subprocess.run([*PYCLASSIFY, "check", "-"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("<stdin>:17: spec.egress[0].to[0].ipBlock.cidr:")


def test_explain_json_names_tier_policy_and_rule():
    r = run(
        "explain", DEMO, "--from", "frontend/web", "--to", "backend/db", "--proto", "TCP", "--port", "5432", "--json"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "deny"
    assert doc["ingress"] == {
        "verdict": "deny",
        "tier": "kube-admin",
        "policy": "AdminNetworkPolicy/protect-db",
        "rule": "deny-from-frontend",
        "reason": "rule",
        "logs": [],
    }
    assert doc["egress"]["verdict"] == "allow"


def test_explain_takes_ports_with_every_protocol_that_carries_them():
    # UDPLite packets carry ports (the decoder reads them, port rules compare them): explain takes
    # --port with it as with TCP, and refuses it with ICMP.
    r = run(
        "explain",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--proto",
        "UDPLite",
        "--port",
        "8080",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] in ("allow", "deny")
    r = run("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", "--proto", "ICMP", "--port", "8080")
    assert r.returncode == 2 and "(TCP, UDP, SCTP or UDPLite)" in r.stderr


def test_explain_table_and_log_rules():
    r = run("explain", DEMO, "--from", "203.0.113.7", "--to", "frontend/web", "--port", "80")
    assert r.returncode == 0, r.stderr
    assert "deny by GlobalNetworkPolicy/security.block-known-bad rule 1 in tier security" in r.stdout
    assert "logged by GlobalNetworkPolicy/security.block-known-bad rule 0" in r.stdout
    assert r.stdout.strip().endswith("verdict: DENY")


def test_explain_default_override_and_unknown_end():
    allowed = json.loads(
        run("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", "--port", "8080", "--json").stdout
    )
    assert allowed["verdict"] == "allow"
    # With --default deny, a pod whose every tier passed falls to the (now deny) default.
    denied = json.loads(
        run(
            "explain",
            DEMO,
            "--from",
            "frontend/web",
            "--to",
            "backend/api",
            "--port",
            "8080",
            "--default",
            "deny",
            "--json",
        ).stdout
    )
    assert denied["verdict"] == "deny" and denied["egress"]["reason"] == "default"
    r = run("explain", DEMO, "--from", "nowhere/pod", "--to", "backend/api")
    assert r.returncode == 2 and "nowhere/pod" in r.stderr
    assert run("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", "--proto", "bogus").returncode == 2


def test_explain_invalid_manifests_exit_1():
    r = run("explain", BROKEN, "--from", "10.0.0.1", "--to", "10.0.0.2")
    assert r.returncode == 1 and "ipBlock.cidr" in r.stderr


def test_matrix_json_contract_agrees_with_explain():
    r = run("matrix", DEMO, "--proto", "TCP", "--port", "8080", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"pods", "protocol", "port", "matrix"}
    assert doc["protocol"] == "TCP" and doc["port"] == 8080
    pods = doc["pods"]
    assert pods == sorted(pods) and "frontend/web" in pods and "backend/api" in pods
    assert len(doc["matrix"]) == len(pods) and all(len(row) == len(pods) for row in doc["matrix"])
    i, j = pods.index("frontend/web"), pods.index("backend/api")
    assert doc["matrix"][i][j] is True
    assert doc["matrix"][i][pods.index("backend/db")] is False
    for a, row in zip(pods, doc["matrix"]):
        for b, allowed in list(zip(pods, row))[:2]:
            one = json.loads(run("explain", DEMO, "--from", a, "--to", b, "--port", "8080", "--json").stdout)
            assert (one["verdict"] == "allow") is allowed, (a, b)


def test_matrix_grid_on_terminal():
    r = run("matrix", DEMO, "--port", "8080")
    assert r.returncode == 0 and "frontend/web" in r.stdout and "pod pairs allowed" in r.stdout


def test_native_and_reference_engines_agree_on_the_demo():
    for args in (
        ["matrix", DEMO, "--proto", "TCP", "--port", "8080", "--json"],
        ["explain", DEMO, "--from", "203.0.113.7", "--to", "frontend/web", "--port", "80", "--json"],
    ):
        native = json.loads(run(*args, "--engine", "native").stdout)
        reference = json.loads(run(*args, "--engine", "reference").stdout)
        assert native == reference


# --- staged policies beside the enforced ones --------------------------------------------------

STAGED = str(EXAMPLES / "staged")


def test_check_counts_staged_policies_apart():
    r = run("check", DEMO, STAGED, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    plain = json.loads(run("check", DEMO, "--json").stdout)
    assert doc["staged_policies"] == 2 and plain["staged_policies"] == 0
    assert doc["policies"] == plain["policies"]  # not in force: not among the policies
    assert "2 staged policies" in run("check", DEMO, STAGED).stdout


def test_explain_reports_the_staged_verdict_without_changing_the_real_one():
    args = ("explain", DEMO, "--from", "frontend/web", "--to", "backend/api", "--proto", "TCP", "--port", "8080")
    real = json.loads(run(*args, "--json").stdout)
    both = json.loads(run(*args[:2], STAGED, *args[2:], "--json").stdout)
    assert "staged" not in real
    assert both["verdict"] == real["verdict"] == "allow"
    assert both["ingress"] == real["ingress"]
    staged = both["staged"]
    assert staged["verdict"] == "deny" and staged["ingress"]["reason"] == "end-of-tier"
    assert staged["summary"] == "would deny at the end of tier default (ingress)"
    text = run(*args[:2], STAGED, *args[2:]).stdout
    assert "verdict: ALLOW" in text and "staged:  would deny at the end of tier default (ingress) (differs)" in text
    # the staged policy's own rule, named by its staged kind
    args443 = (*args[:2], STAGED, *args[2:-1], "8443")
    staged = json.loads(run(*args443, "--json").stdout)["staged"]
    assert (
        staged["summary"]
        == "would allow by StagedKubernetesNetworkPolicy/backend/allow-frontend-to-api rule 0 (ingress)"
    )


# --- messages ------------------------------------------------------------------------------------


def test_help_lists_every_exit_code():
    """Every exit code the command guide's table lists is in ``pyclassify --help``."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text()
    table = guide.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    codes = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert {"0", "1", "2", "5", "6", "7", "130"} <= set(codes)
    r = run("--help")
    assert r.returncode == 0
    lines = [line.strip() for line in r.stdout.splitlines()]
    for code in codes:
        assert any(line.startswith(f"{code} ") for line in lines), f"--help does not list exit code {code}"


def test_counted_nouns_agree(tmp_path):
    (tmp_path / "np.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: a}\n"
        "spec: {podSelector: {}}\n"
    )
    r = run("check", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "1 document: 1 policy, 0 endpoints" in r.stdout and "0 warnings" in r.stdout


def test_replay_flows_needs_out():
    r = run("replay", DEMO, "--pcap", str(Path(DEMO).parents[1] / "pcaps" / "demo.pcap"), "--flows")
    assert r.returncode == 2 and "--flows" in r.stderr and "--out" in r.stderr


def test_end_of_tier_deny_names_the_isolating_policies(tmp_path):
    flow = ("--from", "backend/api", "--to", "backend/db", "--proto", "UDP", "--port", "9999")
    isolating = ["NetworkPolicy/backend/allow-api-to-db", "NetworkPolicy/backend/default-deny-ingress"]
    for engine in ("native", "reference"):
        r = run("explain", DEMO, *flow, "--engine", engine, "--json")
        assert r.returncode == 0, r.stderr
        ingress = json.loads(r.stdout)["ingress"]
        assert ingress["reason"] == "end-of-tier" and ingress["policies"] == isolating, ingress
    r = run("explain", DEMO, *flow)
    assert f"isolated by {', '.join(isolating)}, no rule matched" in r.stdout
    out = tmp_path / "v.jsonl"
    r = run("replay", DEMO, "--pcap", str(Path(DEMO).parents[1] / "pcaps" / "demo.pcap"), "--out", str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    cut = [x for x in lines if x["ingress"] and x["ingress"]["reason"] == "end-of-tier"]
    assert cut and all(x["ingress"]["policies"] for x in cut)
    assert any(x["dst_endpoint"] == "backend/db" and x["ingress"]["policies"] == isolating for x in cut)
