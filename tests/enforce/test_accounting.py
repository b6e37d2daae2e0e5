"""The accounting of the loops' events (``pyclassify.enforce.accounting``): verdict records named
by the engine that judged them, counted, and written to the flow log."""

from __future__ import annotations

import io
import ipaddress
import json

import numpy as np

from pyclassify.batch import FLAG_HAS_PORTS, new_batch
from pyclassify.enforce.config import EnforceConfig
from pyclassify.enforce.daemon import Enforcer
from tests.enforce import manifests


def test_verdicts_judged_by_a_replaced_engine_never_stop_the_event_drain(tmp_path) -> None:
    """A batch judged while a reload swapped engines can reach the drain after the swap: a rule
    index past the new engine's lists is counted (pyclassify_events_unnamed) and left out, and
    the drain goes on (a dead drain thread fails /healthz and ends the flow log)."""
    manifests.write(tmp_path)
    out = io.StringIO()
    enforcer = Enforcer(EnforceConfig([str(tmp_path)], log_stream=out))
    enforcer.project, engine = enforcer.load()
    enforcer.engine = engine
    h = new_batch(1)
    h[0]["src_addr"] = np.frombuffer(b"\0" * 10 + b"\xff\xff" + ipaddress.ip_address("10.244.2.2").packed, np.uint8)
    h[0]["dst_addr"] = np.frombuffer(b"\0" * 10 + b"\xff\xff" + ipaddress.ip_address("10.244.3.2").packed, np.uint8)
    h[0]["ip_version"], h[0]["protocol"], h[0]["sport"], h[0]["dport"] = 4, 6, 40001, 8080
    h[0]["flags"] = FLAG_HAS_PORTS
    v = engine.judge(h)
    assert v[0]["ingress"]["present"] and v[0]["ingress"]["source_kind"] == 1 and not v[0]["allow"]
    v[0]["ingress"]["rule"] = 10_000  # a rule of a policy the engine in force holds fewer rules of
    enforcer.accounting.account(0, engine, h, v)
    assert enforcer.metrics.events_unnamed._value.get() == 2  # its counter key, and its flow-log line
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["deny"]
