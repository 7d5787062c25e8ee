"""The reliability suite in its reduced form: churn, soak, faults and bad input.

The scenarios live in tests/reliability.py; bench/reliability.py runs the same ones at full
size and writes docs/reliability.md. Each starts its own tatolabd on temporary paths and
fails with every problem it found.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import reliability

from tatolab._control import protocol

slow = pytest.mark.slow


@pytest.fixture
def setup(tmp_path, project_venv) -> reliability.Setup:
    return reliability.Setup(tmp_path, project_venv)


@slow
def test_churn_of_attached_and_kept_loads_leaves_nothing_behind(setup):
    reliability.churn(setup, cycles=30).check()


@slow
def test_six_nodes_under_load_lose_nothing_uncounted_and_stay_flat(setup):
    reliability.soak(setup, seconds=20).check()


@slow
def test_a_random_node_killed_every_second_always_comes_back(setup):
    reliability.kill_nodes(setup, seconds=8).check()


@slow
def test_a_stopped_node_is_reported_hung_and_replaced(setup):
    reliability.stopped_node(setup).check()


@slow
def test_kept_streams_return_after_runtime_kills_they_did_not_cause(setup):
    reliability.kill_runtime(setup, kills=3).check()


@slow
def test_a_node_allocating_without_bound_is_restarted_alone(setup):
    reliability.memory_hog(setup, restarts=2).check()


@slow
def test_a_full_disk_under_logs_and_state_stops_nothing(setup):
    result = reliability.full_disk(setup)
    if result.skipped:
        pytest.skip(result.skipped)
    result.check()


@slow
def test_fuzzed_requests_each_get_a_clear_error_while_others_are_served(setup):
    reliability.fuzz_control(setup, examples=150).check()


@slow
def test_bags_that_do_not_decode_are_skipped_and_counted(setup):
    reliability.fuzz_bags(setup, examples=40).check()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20,
)


@settings(max_examples=300, database=None, deadline=None)
@given(st.binary() | json_values.map(lambda v: json.dumps(v).encode()) | st.integers(1, 200_000).map(lambda n: b"[" * n))
def test_the_request_decoder_returns_a_request_or_says_what_is_wrong(line):
    try:
        request = protocol.decode(line)
    except protocol.ProtocolError as exc:
        assert str(exc)
    else:
        assert isinstance(request, dict)
