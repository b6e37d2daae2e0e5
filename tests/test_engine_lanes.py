"""``NativeEngine.judge_lanes`` (rust/core/src/engine/lanes.rs): one batch judged in lanes with
trackers of their own, DNS answers learned between them. Connections are independent, so
splitting a batch's connections over lanes changes no verdict; and bad lanes are refused whole,
naming the lane."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.captures import write_dns_capture
from pyclassify import domains
from pyclassify.capture import Batch, open_capture
from pyclassify.engine import Lane, NativeEngine, Tracker
from pyclassify.project import load_project

REPO = Path(__file__).resolve().parents[1]
DEMO, DOMAINS = str(REPO / "examples" / "demo"), str(REPO / "examples" / "domains")
FIELDS = ["allow", "reason", "ct_state", "http"]


def engine_with_facts() -> tuple[NativeEngine, domains.DnsLearner]:
    project = load_project([DEMO, DOMAINS])
    project.inventory.domains = domains.new_facts()
    return NativeEngine(project.policy_set, project.inventory), domains.DnsLearner(project.inventory.domains)


def connection_of(headers: np.ndarray) -> np.ndarray:
    """Per header, a number its connection's packets both ways share."""
    a = [bytes(x) for x in headers["src_addr"]]
    b = [bytes(x) for x in headers["dst_addr"]]
    ends = [
        tuple(sorted(((s, int(sp)), (d, int(dp))))) for s, d, sp, dp in zip(a, b, headers["sport"], headers["dport"])
    ]
    return np.array([hash((e, int(p))) & 0xFFFF for e, p in zip(ends, headers["protocol"])])


def judged_in_lanes(engine: NativeEngine, batch, split: int, learner=None) -> np.ndarray:
    headers = np.ascontiguousarray(batch.headers)
    key = connection_of(headers) % split
    lanes = []
    for part in range(split):
        rows = np.flatnonzero(key == part)
        lanes.append(Lane(engine, rows, headers[rows], Tracker(), batch.quotes[rows]))
    dns = learner.answers_in(batch) if learner is not None else None
    tally = engine.judge_lanes(headers, lanes, data=batch.data if dns is not None else None, dns=dns)
    if learner is not None:
        learner.count(tally)
    out = np.zeros(len(headers), dtype=lanes[0].out.dtype)
    for lane in lanes:
        out[lane.rows] = lane.out
    return out


@contextlib.contextmanager
def one_batch(path: str | Path) -> Iterator[Batch]:
    """The capture's one batch (its bytes are the open capture's)."""
    with open_capture(str(path)) as cap:
        (batch,) = list(cap)
        yield batch


def test_one_lane_is_judge() -> None:
    engine, _ = engine_with_facts()
    with one_batch(REPO / "pcaps" / "demo.pcap") as batch:
        single = engine.judge(batch.headers, batch.quotes, Tracker())
        lanes = judged_in_lanes(engine, batch, 1)
    for f in FIELDS:
        assert (single[f] == lanes[f]).all(), f


def test_connections_split_over_lanes_judge_alike_with_dns(tmp_path) -> None:
    paths = [tmp_path / "dns.pcap"]
    write_dns_capture(paths, 3000)
    verdicts, tallies = [], []
    for split in (1, 3):
        engine, learner = engine_with_facts()  # facts of its own
        with one_batch(paths[0]) as batch:
            verdicts.append(judged_in_lanes(engine, batch, split, learner))
        tallies.append(learner.to_json())
    for f in FIELDS:
        assert (verdicts[0][f] == verdicts[1][f]).all(), f
    assert tallies[0] == tallies[1] and tallies[0]["answers"] == 3000 and tallies[0]["learned"] > 0
    assert 0 < verdicts[0]["allow"].sum() < len(verdicts[0])


@pytest.mark.parametrize(
    "bad, said",
    [
        (lambda h, n: dict(rows=np.arange(n)[::-1].copy()), "lanes[0] rows must ascend"),
        (lambda h, n: dict(rows=np.array([0, n]), headers=h[:2]), "lanes[0] rows must ascend within the batch's"),
        (lambda h, n: dict(rows=np.array([-1, 0]), headers=h[:2]), "lanes[0] rows must ascend"),
        (lambda h, n: dict(rows=np.arange(2), headers=h[:3]), "lanes[0] headers has 3 items"),
        (lambda h, n: dict(tracker=None, segments=np.zeros((n, 3), np.int64)), "segments go with a tracker"),
    ],
)
def test_bad_lanes_are_refused_naming_the_lane(bad, said) -> None:
    engine, _ = engine_with_facts()
    with one_batch(REPO / "pcaps" / "demo.pcap") as batch:
        h, n = np.ascontiguousarray(batch.headers), len(batch.headers)
        fields = dict(rows=np.arange(n), headers=h, tracker=Tracker()) | bad(h, n)
        with pytest.raises(ValueError, match=re.escape(said)):
            engine.judge_lanes(h, [Lane(engine, **fields)], data=batch.data)


def test_dns_needs_the_bytes() -> None:
    engine, _ = engine_with_facts()
    with one_batch(REPO / "pcaps" / "demo.pcap") as batch:
        h = np.ascontiguousarray(batch.headers)
        with pytest.raises(ValueError, match="read data"):
            engine.judge_lanes(h, [Lane(engine, np.arange(len(h)), h)], dns=np.zeros((1, 3), np.int64))
        with pytest.raises(ValueError, match=r"\(m, 3\)"):
            engine.judge_lanes(h, [Lane(engine, np.arange(len(h)), h)], data=batch.data, dns=np.zeros(4, np.int64))
