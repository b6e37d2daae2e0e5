"""Writes bench/RELIABILITY.md (and bench/BAD_INPUT.md): runs the soak through both data paths,
the floods in both fail modes, the saturation benchmark beside libnetfilter_queue, the fault
tests (the restarts under a hammering client ``--restarts`` times each) and the bad-input sweep
with ``PYCLASSIFY_RELIABILITY_DIR`` set, then renders what they recorded and which of them
passed. Needs root, gcc and libnetfilter-queue-dev (and scripts/kube-testenv.sh's binaries for
the cluster's fault).

    .venv/bin/python -m bench.reliability                      # bounded soaks (120 s each)
    .venv/bin/python -m bench.reliability --long-soak 1800     # and the long NFQUEUE soak
    .venv/bin/python -m bench.reliability --only faults        # the faults and restarts alone: their
                                                               # sections rewritten, the rest kept
    .venv/bin/python -m bench.reliability --render-only DIR    # tables from an earlier run's DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "RELIABILITY.md"
BAD_INPUT_MD = REPO / "bench" / "BAD_INPUT.md"

#: (fault, pytest node id, what it shows)
FAULTS = [
    (
        "daemon killed (-9), failing closed",
        "tests/enforce/test_enforce_netns.py::test_killed_daemon_fails_as_configured[closed]",
        "new connections dropped while it is down, established ones flow; the next start adopts the chains and enforces",
    ),
    (
        "daemon killed (-9), failing open",
        "tests/enforce/test_enforce_netns.py::test_killed_daemon_fails_as_configured[open]",
        "everything passes while it is down (queue bypass); the next start enforces",
    ),
    (
        "killed during a reload",
        "tests/enforce/test_enforce_netns.py::test_killed_during_a_reload_the_next_start_repairs",
        "the next start finds the chains, keeps one jump, enforces the new files",
    ),
    (
        "killed before a revocation was applied",
        "tests/enforce/test_enforce_netns.py::test_killed_before_a_revocation_the_next_start_revokes",
        "the next start judges every connection an earlier daemon queued and cuts the denied one",
    ),
    (
        "our iptables chains flushed, deleted or reordered by someone else",
        "tests/enforce/test_enforce_netns.py::test_rules_changed_by_someone_else_are_put_back",
        "found and put back within --resync-interval (rules-repaired, pyclassify_iptables_repairs)",
    ),
    (
        "SIGTERM (a rollout, a liveness restart) with a client hammering a denied port",
        "tests/enforce/test_lifecycle_netns.py::test_restarts_with_a_client_hammering_a_denied_port[sigterm-closed]",
        "the rules stay and the next daemon adopts them: no denied connection opens (see Restarts)",
    ),
    (
        "kill -9, then restart, with a client hammering a denied port",
        "tests/enforce/test_lifecycle_netns.py::test_restarts_with_a_client_hammering_a_denied_port[kill-closed]",
        "no denied connection opens; failing open, those opened while none ran are cut at the next start",
    ),
    (
        "kill -9 failing open, then restart, with a client hammering a denied port",
        "tests/enforce/test_lifecycle_netns.py::test_restarts_with_a_client_hammering_a_denied_port[kill-open]",
        "what opened while no daemon ran (queue bypass) is judged and cut at the next start",
    ),
    (
        "connections opened before any rule of ours (no mark)",
        "tests/enforce/test_lifecycle_netns.py::test_a_connection_no_daemon_judged_is_judged_at_start",
        "judged at start: the denied one cut, the allowed one marked and cut by a later change",
    ),
    (
        "daemon killed (-9): SSH to the node, its DNS",
        "tests/enforce/test_lifecycle_netns.py::test_a_dead_daemon_leaves_the_node_reachable",
        "failsafe SSH and the node's DNS (dnsmasq, UDP and TCP) answer while no daemon runs",
    ),
    (
        "`--kubeconfig` daemon killed (-9), then restarted (API server routed, not on the loopback)",
        "tests/kube/test_enforce_restart.py::test_a_killed_cluster_daemon_never_locks_the_node_out",
        "the node reaches its API server and SSH meanwhile; the next daemon lists the cluster and starts",
    ),
    (
        "`--uninstall` (after a kill, and as a preStop while a daemon runs); `--on-stop remove`",
        "tests/enforce/test_lifecycle_netns.py::test_on_stop_remove_and_uninstall_remove_every_rule",
        "every rule removed; a running daemon leaves them out and is not ready; nothing left after its stop",
    ),
    (
        "a second daemon on another queue; chains replaced by another process; a rule replaced in place",
        "tests/enforce/test_lifecycle_netns.py::test_a_second_daemon_and_replaced_rules_are_noticed",
        "the second refuses (exit 7); the rules' content is compared, each change found and put back",
    ),
    (
        "iptables binaries gone under a running daemon (a spawn that fails, as under a pids limit)",
        "tests/enforce/test_lifecycle_netns.py::test_healthz_fails_while_the_rules_cannot_be_checked",
        "the resync keeps trying; /healthz fails after three failed checks, ok again once they pass",
    ),
    (
        "flow-log destination full (stdout on /dev/full)",
        "tests/enforce/test_enforce_netns.py::test_a_full_log_destination_loses_lines_not_enforcement[full]",
        "lines lost and counted (pyclassify_log_lines_lost); enforcement unchanged",
    ),
    (
        "flow-log destination gone (a pipe whose reader exited)",
        "tests/enforce/test_enforce_netns.py::test_a_full_log_destination_loses_lines_not_enforcement[gone]",
        "lines lost and counted; enforcement unchanged; a clean stop",
    ),
    (
        "missing prerequisite or busy resource (no iptables, not root, queue in use, another daemon, metrics port in use, "
        "absent interface)",
        "tests/enforce/test_enforce_netns.py::test_missing_prerequisites_and_busy_resources_are_one_line_and_an_exit_code",
        "one line and exit code 6 or 7; nothing installed",
    ),
    (
        "ConfigMap volume update (`..data` symlink swap)",
        "tests/enforce/test_watch.py::test_a_configmap_update_is_one_reload_of_the_new_files",
        "one reload, of the new files, at the swap",
    ),
    (
        "policy file written in parts when inotify fires",
        "tests/enforce/test_watch.py::test_a_file_is_read_once_its_writer_closes_it",
        "read once its writer closes it; never half",
    ),
    (
        "bridged interface down, then up (each side)",
        "tests/enforce_bridge/test_bridge.py::test_bridge_interface_down_and_up",
        "the daemon keeps running; bridges and judges again once up",
    ),
    (
        "random and malformed frames on the bridge",
        "tests/enforce_bridge/test_bridge.py::test_random_frames_keep_the_bridge_up_and_every_frame_is_accounted_for",
        "bridge stays up; every frame accounted for",
    ),
    (
        "a policy set over the memory limit (300 distinct 26 KB GlobalNetworkPolicies, a 384 MiB cgroup)",
        "tests/enforce/test_memory_netns.py::test_a_set_over_the_memory_budget_is_rejected_and_the_daemon_lives",
        "rejected whole before it is built, named in the log and counted; the daemon lives and enforces the set in force; "
        "300 copies of one of them fit",
    ),
    (
        "explain on 2,000 GlobalNetworkPolicies with 300-term selectors (once 3.6 GB), in a 512 MiB cgroup",
        "tests/test_cli_memory.py::test_a_heavy_set_compiles_within_512_mib[selectors-explain]",
        "completes; no OOM kill (see Compile amplification)",
    ),
    (
        "render of 500 NetworkPolicies with 200 ipBlocks each (once 2.7 GB), in a 512 MiB cgroup",
        "tests/test_cli_memory.py::test_a_heavy_set_compiles_within_512_mib[ipblocks-render]",
        "completes; no OOM kill (see Compile amplification)",
    ),
    (
        "check of that ipBlock set under `--memory-budget 64Mi`, in a 160 MiB cgroup that kills it without",
        "tests/test_cli_memory.py::test_a_set_over_the_budget_is_refused_before_the_limit_kills[ipblocks]",
        "refused before it is built, exit 1, its costliest objects named; no OOM kill",
    ),
    (
        "an object from the cluster rejected (a field its kind's schema refuses)",
        "tests/kube/test_events.py::test_a_rejected_update_is_reported_on_the_object_once",
        "a Warning Event (PolicyRejected) on the object naming the field; the same rejection again counts on it",
    ),
    (
        "an object from the cluster that brings the set over the memory budget",
        "tests/kube/test_events.py::test_a_set_over_the_budget_is_reported_on_the_object_that_brings_it_over",
        "rejected, a Warning Event (PolicyOverBudget) on it naming the budget and the costliest objects",
    ),
    (
        "pyclassify removed from a node a killed daemon left its rules on",
        "tests/kube/test_deploy.py::test_the_uninstall_command_removes_every_rule_a_daemon_left",
        "deploy/uninstall/'s command removes every rule",
    ),
    (
        "the policy directory removed, made again, swapped in by rename; a file emptied; a FIFO dropped in",
        "tests/enforce/test_policy_input_netns.py::test_the_policy_directory_removed_made_again_swapped_emptied_and_a_fifo",
        "the policy in force stays while the directory is gone (/healthz says so); the watch follows the new directory; "
        "an emptied file keeps its policies; a FIFO is never opened",
    ),
    (
        "2,000 idle connections to the metrics listener, in a pids limit",
        "tests/enforce/test_surfaces_netns.py::test_two_thousand_idle_connections_in_a_pids_limit",
        "no thread per connection; the probes answer; the resync thread repairs; enforcement holds",
    ),
    (
        "the metrics port read from a pod",
        "tests/enforce/test_surfaces_netns.py::test_metrics_are_on_the_loopback_unless_an_address_is_given",
        "refused: on the node's loopback unless an address is given; no policy names with --no-metrics-rule-labels",
    ),
    (
        "admission webhook: 2,000 idle connections",
        "tests/admission/test_admission_webhook_bounds.py::test_two_thousand_idle_connections_hold_no_threads",
        "no thread per connection; /healthz and reviews answer",
    ),
    (
        "admission webhook: 200 stalled 3 MiB bodies",
        "tests/admission/test_admission_webhook_bounds.py::test_stalled_bodies_are_bounded_and_cut_at_the_deadline",
        "bodies held within the buffer bound, the rest refused (503) or cut at the request deadline",
    ),
    (
        "admission webhook: 100 one-byte trickles",
        "tests/admission/test_admission_webhook_bounds.py::test_one_byte_trickles_are_cut_at_the_request_deadline",
        "every one cut at the request deadline",
    ),
    (
        "admission webhook: certificate rotated on disk",
        "tests/admission/test_admission_webhook_bounds.py::test_a_rotated_certificate_serves_new_connections",
        "new connections get the new certificate; a broken pair is refused and the last good one stays",
    ),
    (
        "admission webhook: a lone surrogate, failure policy Ignore",
        "tests/admission/test_admission_webhook_bounds.py::test_a_lone_surrogate_is_judged_as_the_api_server_reads_it[Ignore]",
        "judged as the API server reads it (U+FFFD): rejected by the rule, never admitted by the failure policy",
    ),
]


def _pytest(args: list[str], env: dict[str, str], junit: Path | None = None) -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", *args]
    if junit is not None:
        cmd.append(f"--junitxml={junit}")
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def run(results: Path, soak_seconds: float, long_soak: float | None, restarts: int, only: str | None = None) -> None:
    env = {
        **os.environ,
        "PYCLASSIFY_RELIABILITY_DIR": str(results),
        "PYCLASSIFY_SOAK_SECONDS": str(soak_seconds),
        "PYCLASSIFY_BAD_INPUT_TABLE": str(results / "bad_input.json"),
        "PYCLASSIFY_RESTARTS": str(restarts),
    }
    if only is None:
        _pytest(
            ["tests/enforce/test_soak.py", "tests/enforce/test_flood.py", "bench/test_bench_flood.py"],
            env,
            results / "load.xml",
        )
    _pytest(sorted({node.split("::")[0] for _, node, _ in FAULTS}), env, results / "faults.xml")
    if only is None:
        _pytest(["tests/test_bad_input.py"], env, results / "bad_input.xml")
    if long_soak and only is None:
        _pytest(["bench/test_bench_soak.py"], {**env, "PYCLASSIFY_SOAK_SECONDS": str(long_soak)}, results / "long.xml")


def _outcomes(results: Path) -> dict[str, str]:
    """pytest node id -> passed / failed / skipped, from every junit file of the run."""
    out: dict[str, str] = {}
    for xml in results.glob("*.xml"):
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = case.get("classname", "").replace(".", "/")
            node = f"{path}.py::{case.get('name')}"
            kids = {child.tag for child in case}
            out[node] = "failed" if kids & {"failure", "error"} else "skipped" if "skipped" in kids else "passed"
    return out


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _n(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _soak_rows(runs: dict[str, dict[str, Any]]) -> list[str]:
    names = list(runs)
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]

    def row(label: str, f: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(f(r) for r in runs.values()) + " |")

    row(
        "length, s / policy versions / reloads / rejected",
        lambda r: f"{_n(r['seconds'])} / {_n(r['policy_versions'])} / {_n(r['reloads'])} / {_n(r['reloads_rejected'])}",
    )
    row(
        "probes / judged (one version in force) / in a switch-over",
        lambda r: f"{_n(r['probes'])} / {_n(r['judged'])} / {_n(r['in_switch_over'])}",
    )
    row("**probes with another verdict than the version in force**", lambda r: f"**{_n(r['mismatches'])}**")
    row("allowed at their start, cut by the next version", lambda r: _n(r["cut_by_next_version"]))
    row(
        "denied at their start, first packet judged under the next version (which allows them)",
        lambda r: _n(r.get("opened_by_next_version", 0)),
    )
    row(
        "switch-over (written → in force, revocations done) p50 / p99 / max, ms",
        lambda r: " / ".join(_n(r["switch_over_ms"][k]) for k in ("p50", "p99", "max")),
    )
    row(
        "held connections denied by a change: first failed ping after the write, s (includes the ping's 0.3 s timeout)",
        lambda r: ", ".join(f"{k} {_n(v)}" for k, v in r["held_cut_s"].items()),
    )
    row(
        "old connections kept while allowed",
        lambda r: ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["held_kept"].items()),
    )
    row(
        "a revoked connection passes again once a change allows it",
        lambda r: ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r.get("held_restored", {}).items()) or "—",
    )
    row(
        "RSS end of warm-up → max after, MB (growth)",
        lambda r: f"{_n(r['rss_warm_mb'])} → {_n(r['rss_max_mb'])} ({r['rss_growth'] * 100:+.1f} %)",
    )
    row(
        "descriptors / threads: fewest in warm-up → fewest in the last quarter (most after warm-up)",
        lambda r: (
            f"{r.get('fds_floor_warm', '?')} → {r.get('fds_floor_end', '?')} ({r['fds_max']}) / "
            f"{r.get('threads_floor_warm', '?')} → {r.get('threads_floor_end', '?')} ({r['threads_max']})"
        ),
    )
    row(
        "/readyz + /metrics each second: p50 / p99 / max ms, failures",
        lambda r: " / ".join(_n(r["scrape_ms"][k]) for k in ("p50", "p99", "max")) + f", {r['scrape_ms']['failures']}",
    )
    return lines


def _flood_rows(runs: dict[str, dict[str, Any]]) -> list[str]:
    names = list(runs)
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]

    def row(label: str, f: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(f(r) for r in runs.values()) + " |")

    row("sent: SYN + UDP", lambda r: f"{_n(r['sent']['syn'])} + {_n(r['sent']['udp'])}")
    row("reached the NFQUEUE rule", lambda r: _n(r["reached_queue_rule"]))
    row("judged by the daemon", lambda r: _n(int(r["judged"])))
    row(
        "kernel: queue full / socket full drops",
        lambda r: f"{_n(r['kernel']['queue_dropped'])} / {_n(r['kernel']['user_dropped'])}",
    )
    row("**denied packets delivered unjudged**", lambda r: f"**{_n(r['unjudged_delivered'])}**")
    row("established connection: pings failed", lambda r: f"{r['hold_failures']} of {r['hold_pings']}")
    row(
        "/readyz + /metrics during the flood: p50 / max ms, failures",
        lambda r: f"{_n(r['scrape_ms_p50'])} / {_n(r['scrape_ms_max'])}, {r['scrape_failures']}",
    )
    return lines


def _mib(v: Any) -> str:
    return "—" if v is None else f"{v / 2**20:,.1f}"


def _memory_rows(r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return ["## Memory: a policy set over the budget", "", "(not recorded)", ""]
    return [
        "## Memory: a policy set over the budget",
        "",
        "`tests/enforce/test_memory_netns.py`: the daemon in a memory cgroup of its own, as the DaemonSet's limit",
        "puts it; its budget derived from the limit (`--memory-budget auto`: half of what the limit leaves after",
        "96 MiB). A policy set is estimated as it is read and normalized (each distinct part at its measured",
        "cost, `pyclassify/sharing.py`), and rejected whole before the engine builds it once the estimate passes.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| cgroup memory limit / budget, MiB | {_mib(r['limit_bytes'])} / {_mib(r['budget_bytes'])} |",
        f"| set in force (the test's manifests): estimate, MiB | {_mib(r['estimate_in_force_bytes'])} |",
        f"| set written | {r['rejected_set']} |",
        f"| **rejected**, after (s) | **yes**, {r['rejected_after_s']} |",
        f"| the cgroup's peak memory up to the rejection, MiB | {_mib(r['peak_bytes_at_rejection'])} |",
        f"| the set then written | {r['accepted_set']} |",
        f"| accepted: its estimate, MiB; the cgroup's peak since the start, MiB | {_mib(r['estimate_accepted_bytes'])}; "
        f"{_mib(r['peak_bytes_after_accepting'])} |",
        f"| OOM kills | {r['oom_kills']} |",
        "",
        f"The rejection as logged: `{r['rejection']}`",
        "",
    ]


def _surface_rows(results: Path) -> list[str]:
    lines = ["## Surfaces under 2,000 idle connections", ""]
    d = _load(results, "surfaces-idle-connections")
    if d:
        lines += [
            "`tests/enforce/test_surfaces_netns.py`: 2,000 connections held open and idle against the daemon's",
            "metrics listener (`--metrics 127.0.0.1:9464`), the daemon in a pids cgroup limited to its own threads",
            f"and processes plus 24 (pids.max {d['pids_max']}); meanwhile /healthz and /readyz asked five times each,",
            "connections tried through the daemon, and its iptables chains flushed for the resync thread to repair.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| daemon threads before → while held | {d['threads_before']} → {d['threads_during']} |",
            f"| daemon RSS before → while held, MiB | {_mib(d['rss_before_bytes'])} → {_mib(d['rss_during_bytes'])} |",
            f"| idle connections closed to make room (cap 64) / refused | {_n(int(d['evicted']))} / {_n(int(d['refused']))} |",
            f"| probes while held: max ms (all ten) | {d['probe_ms_max']} ({', '.join(map(str, d['probe_ms']))}) |",
            f"| rules flushed while held: repaired | {'yes' if d['repaired_during'] else 'NO'} |",
            "",
        ]
    hooks = {k: _load(results, k) for k in ("webhook-idle-connections", "webhook-stalled-bodies", "webhook-trickles")}
    if any(hooks.values()):
        lines += [
            "`tests/admission/test_admission_webhook_bounds.py`: the admission webhook (8 workers, 256",
            "connections, a request deadline of 2 s in the test, 30 s by default; bodies held at most 64 MiB at",
            "once).",
            "",
            "| load | outcome |",
            "|---|---|",
        ]
        if w := hooks["webhook-idle-connections"]:
            lines.append(
                f"| {w['connections']:,} idle connections (no TLS handshake begun) | {w['threads_added']} threads added, "
                f"{w['open']} open, {w['evicted']:,} idle ones closed to make room, /healthz in "
                f"{w['healthz_ms']} ms |"
            )
        if w := hooks["webhook-stalled-bodies"]:
            lines.append(
                f"| {w['connections']} connections announcing {_mib(w['body_bytes'])} MiB bodies, sending "
                f"{_mib(w['sent_bytes'])} MiB and stalling | RSS +{w['rss_growth_mb']} MiB; {w['busy']} "
                f"refused at the buffer bound (503), {w['timeouts']} cut at the {w['deadline_s']} s deadline |"
            )
        if w := hooks["webhook-trickles"]:
            lines.append(
                f"| {w['connections']} connections trickling one byte every 0.25 s | all cut after "
                f"{w['all_cut_after_s']} s (deadline {w['deadline_s']} s) |"
            )
        lines.append("")
    if len(lines) == 2:
        lines += ["(not recorded)", ""]
    return lines


def _restart_section(results: Path) -> list[str]:
    """The restarts under a hammering client: each mode's gaps and what the client got."""
    runs = [r for key in ("sigterm-closed", "kill-closed", "kill-open") if (r := _load(results, f"restart-{key}"))]
    lines = [
        "## Restarts: the window in which a denied connection can open",
        "",
        "`tests/enforce/test_lifecycle_netns.py::test_restarts_with_a_client_hammering_a_denied_port`: pod c's",
        "client opens TCP connection after connection to pod b, which policy closes to c (200 ms connect",
        "timeout, every connection that opens kept and pinged again at the end), while the daemon is stopped",
        "(SIGTERM, as a rollout or a liveness restart does) or killed (-9) and started again, N times in a",
        "row. The gap is the time from the signal to the next daemon's `start` line (policy loaded, queues",
        "bound, rules adopted, the kernel's connections judged): the rules stay through it.",
        "",
    ]
    if not runs:
        return lines + ["(no restart recorded)", ""]
    lines[-1:-1] = [
        "",
        f"Measured on {dt.date.today().isoformat()} by `.venv/bin/python -m bench.reliability --only faults "
        f"--restarts {runs[0]['restarts']}` (root; the same test runs in CI with 3 restarts a mode).",
    ]
    lines += [
        "| stop, fail mode | restarts | gap p50 / max, s | connections tried | **denied connections opened** "
        "| still open after the next start | revoked at start |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        gaps = sorted(r["gaps_s"])
        lines.append(
            f"| {r['how']}, --fail {r['fail']} | {r['restarts']} | {_n(gaps[len(gaps) // 2])} / "
            f"{_n(gaps[-1])} | {_n(r['attempts'])} | **{_n(r['opened'])}** | {_n(r['still_open'])} | "
            f"{_n(r['revoked_at_start'])} |"
        )
    lines += [
        "",
        "Failing closed the window is zero: between two daemons the kernel drops what the kept rules",
        "queue, and the next daemon binds its queues before it replaces the rules in one transaction.",
        "Failing open, what opens while no daemon runs (queue bypass) carries the judged mark and is cut",
        "by the next start's judging of the kernel's connections; a connection without the mark (opened",
        "before any rule of ours) is judged there too.",
        "",
    ]
    return lines


def _faults_section(outcomes: dict[str, str]) -> list[str]:
    lines = ["## Faults survived", "", "| fault | test | outcome | result |", "|---|---|---|---|"]
    for fault, node, shows in FAULTS:
        lines.append(f"| {fault} | `{node.split('::')[-1]}` | {shows} | {outcomes.get(node, 'not run')} |")
    lines += [
        "| a kernel without NFQUEUE or AF_PACKET | — | exit 6, one line (the code path; not testable on this kernel) | not run |",
        "",
    ]
    return lines


def splice(text: str, heading: str, section: list[str], before: str) -> str:
    """``text`` with the section under ``heading`` (up to the next ``## ``) replaced by
    ``section``; one that is not there goes before the heading ``before``."""
    lines = text.splitlines()
    body = section if section[-1] == "" else [*section, ""]
    if heading in lines:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = body
    else:
        at = lines.index(before)
        lines[at:at] = body
    return "\n".join(lines) + "\n"


#: Measured by hand (each figure with its command), not by this script: kept as written.
COMPILE = "## Compile amplification: the one-shot commands"


def _kept_section(heading: str) -> list[str]:
    """The section under ``heading`` of the RELIABILITY.md there is, as it is (none: nothing)."""
    lines = OUT.read_text().splitlines() if OUT.exists() else []
    if heading not in lines:
        return []
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def render_faults(results: Path, text: str) -> str:
    """``text`` (an earlier RELIABILITY.md) with its restart, memory, surface and fault sections
    from ``results``."""
    outcomes = _outcomes(results)
    for heading, section in (
        ("## Restarts: the window in which a denied connection can open", _restart_section(results)),
        ("## Memory: a policy set over the budget", _memory_rows(_load(results, "memory-budget"))),
        ("## Surfaces under 2,000 idle connections", _surface_rows(results)),
    ):
        text = splice(text, heading, section, "## Faults survived")
    return splice(text, "## Faults survived", _faults_section(outcomes), "## Inputs tried")


def render(results: Path) -> str:
    outcomes = _outcomes(results)
    lines = [
        "# Reliability: load held, faults survived, inputs tried, what was lost",
        "",
        f"Written by `bench/reliability.py` on {dt.date.today().isoformat()} on this machine (2 cores, Linux "
        f"{os.uname().release}); the same tests run in CI as root in their bounded form. Rerun: "
        "`.venv/bin/python -m bench.reliability [--long-soak 1800]` (root).",
        "",
        "## Load: policy flipping every 200 ms under continuous traffic",
        "",
        "`tests/enforce/test_soak.py` (the long one: `bench/test_bench_soak.py`): four pods; 4 new TCP and 4 new UDP",
        "connections a second on each probed pair; a policy version written every 200 ms flips two pairs; a late",
        "change denies a pair whose connections were held open since the start. Through NFQUEUE, pods routed",
        "by a node namespace; through the AF_PACKET bridge, two pods on each side (pairs across it only). A",
        "version is in force from the end of the reload that loaded it, told by the policy count that reload",
        "reports (each version also holds a few policies selecting no pod), until the next could have swapped.",
        "",
    ]
    soaks = {
        name: r
        for name, key in (
            ("NFQUEUE", "soak-nfqueue"),
            ("bridge", "soak-bridge"),
            ("NFQUEUE, long", "soak-long-nfqueue"),
        )
        if (r := _load(results, key))
    }
    lines += _soak_rows(soaks) if soaks else ["(no soak recorded)"]
    lines += [
        "",
        "Lost: nothing. Every probe sent while one policy was in force got that policy's verdict; what a",
        "change denied was cut, both ways, however old.",
        "",
        "## Flood and overflow (NFQUEUE)",
        "",
        "`tests/enforce/test_flood.py`: a SYN flood, then a UDP flood, 4 s each at the full rate of a C sender",
        "(`tests/enforce/c/flood.c`) from 200 spoofed addresses of pod a's subnet and every source port, at",
        "pod b, whose policy denies them; queue length 256; an established connection pinged every 200 ms.",
        "",
    ]
    floods = {f"--fail {k}": r for k in ("closed", "open") if (r := _load(results, f"flood-{k}"))}
    lines += _flood_rows(floods) if floods else ["(no flood recorded)"]
    lines += [
        "",
        "Lost: what the fail mode says and nothing else — failing closed, the packets that found the queue",
        "full (dropped, counted by the kernel and `pyclassify_nfqueue_kernel_drops`); failing open, those",
        "packets pass unjudged (the kernel counts them nowhere: the difference between the rule's counter",
        "and the queue's id sequence bounds them).",
        "",
    ]
    sat = _load(results, "saturation")
    if sat:
        lines += [
            "### Verdicts per second at saturation",
            "",
            f"`bench/test_bench_flood.py`: one consumer at a time on queue 0 (length {sat['queue_maxlen']}), the same",
            f"UDP flood for {_n(sat['seconds'])} s; the C consumer is libnetfilter_queue's documented loop, one",
            "NF_ACCEPT per packet and no judging (`tests/enforce/c/nfq_accept.c`).",
            "",
            "| consumer | sent | reached the rule | verdicts | queue-full drops | verdicts/s | ratio to C |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in sat.items():
            if isinstance(r, dict):
                bound = (
                    " (no drop: it kept up with the sender, so this is a lower bound)"
                    if not r.get("queue_dropped")
                    else ""
                )
                lines.append(
                    f"| {name} | {_n(r['sent'])} | {_n(r['queued'])} | {_n(int(r['verdicts']))} | "
                    f"{_n(r.get('queue_dropped'))} | {_n(r['verdicts_per_s'])}{bound} | {_n(r['ratio_to_c'])} |"
                )
        lines += [
            "",
            "Both consumers share the machine's two cores with the sender, the kernel's forwarding and",
            "each other's namespaces; pyclassify batches its verdicts, the C loop gives one per packet.",
            "",
        ]
    lines += [
        "The kernel's connection-table cap (`nf_conntrack_max`) is read-only inside a network namespace on",
        "this kernel, so a full kernel table is not exercised here; its size, cap and early drops are",
        "exported (`pyclassify_kernel_conntrack_{entries,max,events}`). The engine's own tracker (the bridge's",
        "table) drops unassured entries early at its cap (`--conntrack-max`), counted",
        "(`tests/native/test_engine_client.py::test_tracker_counters_cross_the_abi_in_the_rust_order`).",
        "",
    ]
    lines += _restart_section(results)
    lines += _memory_rows(_load(results, "memory-budget"))
    lines += _kept_section(COMPILE)
    lines += _surface_rows(results)
    lines += _faults_section(outcomes)
    lines += [
        "## Inputs tried",
        "",
    ]
    bad = results / "bad_input.json"
    if bad.exists():
        rows = json.loads(bad.read_text())
        by_command: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_command.setdefault(r["command"], []).append(r)
        lines += [
            "`tests/test_bad_input.py`: each case runs the real command with a time bound and checks its exit",
            "code, its message, and that no traceback, panic, hang or signal occurs. Every case:",
            "[bench/BAD_INPUT.md](BAD_INPUT.md).",
            "",
            "| command | cases | as expected | exit codes |",
            "|---|---|---|---|",
        ]
        for command, rs in sorted(by_command.items()):
            ok = sum(outcomes.get(f"tests/test_bad_input.py::test_bad_input[{r['id']}]") == "passed" for r in rs)
            codes = sorted({r["code"] for r in rs})
            lines.append(f"| {command} | {len(rs)} | {ok} | {', '.join(map(str, codes))} |")
        cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        BAD_INPUT_MD.write_text(
            "\n".join(
                [
                    "# Bad-input sweep: every case",
                    "",
                    "Written by `bench/reliability.py` from `tests/test_bad_input.py`.",
                    "",
                    "| id | command | input | exit | message fragment | observed |",
                    "|---|---|---|---|---|---|",
                ]
                + [
                    f"| {cell(r['id'])} | {cell(r['command'])} | {cell(r['input'])} | {r['code']} | {cell(r['fragment'])} | "
                    f"{cell(r['observed'])} |"
                    for r in rows
                ]
            )
            + "\n"
        )
    else:
        lines.append("(no bad-input table recorded)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soak-seconds", type=float, default=120)
    ap.add_argument("--long-soak", type=float, default=None, metavar="SECONDS")
    ap.add_argument("--restarts", type=int, default=20, help="restarts under the hammering client, per mode")
    ap.add_argument(
        "--only",
        choices=["faults"],
        default=None,
        help="run the faults (and restarts) alone; their sections of RELIABILITY.md are rewritten",
    )
    ap.add_argument("--render-only", type=Path, default=None, metavar="DIR")
    args = ap.parse_args()
    results = args.render_only or Path(tempfile.mkdtemp(prefix="pyclassify-reliability-"))
    if args.render_only is None:
        run(results, args.soak_seconds, args.long_soak, args.restarts, args.only)
    OUT.write_text(render_faults(results, OUT.read_text()) if args.only else render(results))
    print(f"wrote {OUT} from {results}")


if __name__ == "__main__":
    main()
