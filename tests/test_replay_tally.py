"""The native count of a batch's verdicts (``VerdictTally``, which replay's summary is made of)
against the same counts taken one record at a time in Python."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify._engine import VerdictTally
from pyclassify.batch import VERDICT_DTYPE
from pyclassify.engine import (
    CT_NEW_PICKUP,
    CT_NEW_PICKUP_REPLY,
    HTTP_AWAITS,
    HTTP_ERROR,
    HTTP_REQUEST,
    HTTP_TABLE_FULL,
    PACKET_POLICY,
)

REASONS = 8  # packets by reason: a reason past the last counts in the last

side = st.fixed_dictionaries(
    {
        "present": st.sampled_from([0, 1, 1, 1, 2]),
        "allow": st.integers(0, 1),
        "reason": st.integers(0, 3),
        "source_kind": st.integers(0, 2),
        "tier": st.integers(-1, 2),
        "source": st.integers(-1, 3),
        "rule": st.integers(-1, 3),
        "logs": st.integers(0, 255),
    }
)
verdict = st.fixed_dictionaries(
    {
        "allow": st.integers(0, 1),
        "reason": st.sampled_from([PACKET_POLICY, PACKET_POLICY, 1, 2, 3, 4, 5, 9]),
        "ct_state": st.sampled_from([0, 1, CT_NEW_PICKUP, CT_NEW_PICKUP_REPLY, 200]),
        "http": st.sampled_from([0, 0, HTTP_AWAITS, HTTP_REQUEST, 14, HTTP_TABLE_FULL, HTTP_ERROR, HTTP_ERROR + 3]),
        "egress": side,
        "ingress": side,
    }
)


def records(rows: list[dict]) -> np.ndarray:
    out = np.zeros(len(rows), dtype=VERDICT_DTYPE)
    for i, row in enumerate(rows):
        for key, value in row.items():
            if isinstance(value, dict):
                for field, v in value.items():
                    out[i][key][field] = v
            else:
                out[i][key] = value
    return out


def one_at_a_time(rows: list[dict], outcomes_by_rule: bool) -> tuple:
    """The counts as the summary defines them, a record at a time."""
    reasons = [0] * REASONS
    allowed = policy_allowed = pickups = 0
    no_policy = [0, 0]
    by_rule: Counter = Counter()
    for v in rows:
        allowed += v["allow"]
        reasons[min(v["reason"], REASONS - 1)] += 1
        if v["reason"] != PACKET_POLICY:
            continue
        policy_allowed += v["allow"]
        pickups += v["ct_state"] in (CT_NEW_PICKUP, CT_NEW_PICKUP_REPLY)
        # an HTTP outcome, not a rule's decision: admitted provisionally, or the stream cut
        outcome = (v["http"] == HTTP_AWAITS and v["allow"]) or v["http"] >= HTTP_TABLE_FULL
        if outcome and not outcomes_by_rule:
            continue
        for direction, name in enumerate(("egress", "ingress")):
            s = v[name]
            if s["present"] != 1:
                no_policy[direction] += 1
                continue
            key = (direction, s["tier"], s["source_kind"], s["source"], s["rule"], s["reason"], s["allow"])
            by_rule[key] += 1
    return len(rows), allowed, reasons, policy_allowed, pickups, tuple(no_policy), by_rule


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(verdict, max_size=40), max_size=4), outcomes_by_rule=st.booleans())
def test_native_counts_agree_with_a_record_at_a_time(batches, outcomes_by_rule):
    tally = VerdictTally()
    for rows in batches:  # one tally over several batches: its table is emptied by each
        *counts, by_rule = tally.add(records(rows), outcomes_by_rule=outcomes_by_rule)
        *expected, expected_by_rule = one_at_a_time(rows, outcomes_by_rule)
        assert counts == expected
        assert len(by_rule) == len(expected_by_rule)
        assert Counter(dict(by_rule)) == expected_by_rule


def test_a_buffer_of_another_record_is_refused():
    with pytest.raises(ValueError):
        VerdictTally().add(np.zeros(4, dtype=np.uint8))
