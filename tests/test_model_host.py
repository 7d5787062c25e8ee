"""The host spec and control messages (tatolab/_model/host.py): what the runtime writes, the node
host reads back unchanged; a line that does not fit is an error naming the node, the field and
the fix, never a KeyError inside the host."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tatolab._host.spec import (EXIT_CANNOT_RUN, STOP, SpecProblem, add_link, encode, node_spec, read_message,
                                read_spec, remove_link)


def a_spec() -> dict[str, object]:
    node = {"name": "cam", "class": "nodes.c:Cam", "inputs": [{"port": "in", "delivery_profile": "newest",
                                                             "audio": {"sample_rate": 16000, "channels": 1}}],
            "outputs": [{"port": "out"}], "execution": "continuous", "interval_ms": 10}
    return dict(node_spec("s", node, project="/p", status=None, sources=None,  # type: ignore[arg-type]
                          outputs={"out": {"base": "/dev/shm/x"}}))


def test_a_spec_the_runtime_writes_reads_back_unchanged():
    spec = a_spec()
    assert read_spec(encode(spec)) == spec  # type: ignore[arg-type]
    assert encode(spec) == (json.dumps(spec) + "\n").encode()  # the bytes json.dumps always gave


def test_an_empty_line_or_stop_is_stop():
    assert read_spec(b"\n") == STOP
    assert read_spec(encode(STOP)) == STOP


@pytest.mark.parametrize("change, where", [
    (lambda s: s.update({"class": 3}), "class: expected `str`, got `int`"),
    (lambda s: s.pop("outputs"), "missing required field `outputs`"),
    (lambda s: s["inputs"]["in"].update(delivery_profile="fast"), "delivery_profile: invalid enum value 'fast'"),
    (lambda s: s.update(execution="sometimes"), "execution"),
])
def test_a_spec_that_does_not_fit_names_the_node_the_field_and_the_fix(change, where):
    spec = a_spec()
    change(spec)
    with pytest.raises(SpecProblem) as caught:
        read_spec(json.dumps(spec))
    text = str(caught.value)
    assert text.startswith("node cam of stream s cannot read the spec the runtime gave it: ")
    assert where in text
    assert "`tatolab sdk <project>`" in text
    assert caught.value.node == "cam" and caught.value.stream == "s"


def test_a_spec_that_is_not_json_or_names_no_node_says_so():
    with pytest.raises(SpecProblem, match="spec is not JSON.*tatolab sdk"):
        read_spec(b"{half\n")
    with pytest.raises(SpecProblem, match="^a node host cannot read the spec"):
        read_spec(b"[1, 2]\n")


def test_control_messages_read_back_and_a_bad_one_names_the_node():
    link = {"key": "a/out->cam/in", "base": "/dev/shm/r", "reader_index": 2}
    assert read_message(encode(add_link("in", link)), "cam") == {"op": "add_link", "port": "in", "link": link}
    assert read_message(encode(remove_link("k")), "cam") == {"op": "remove_link", "key": "k"}
    assert read_message(encode(STOP), "cam") == STOP
    with pytest.raises(SpecProblem, match="^node cam cannot read a control message from the runtime: its op is 'jump'"):
        read_message(b'{"op": "jump"}\n', "cam")
    with pytest.raises(SpecProblem, match=r"link.reader_index: expected `int`, got `str`.*tatolab sdk"):
        read_message(b'{"op": "add_link", "port": "in", "link": {"reader_index": "2"}}\n', "cam")


@pytest.mark.slow
def test_a_node_host_given_a_bad_spec_fails_once_naming_the_node():
    """The real host process: one error line naming the node and the fix, and the exit that says
    "failed, do not restart"."""
    spec = a_spec()
    spec["outputs"] = {"out": {"ring": "/dev/shm/x"}}
    done = subprocess.run([sys.executable, "-m", "tatolab._host"], input=json.dumps(spec) + "\n",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_CANNOT_RUN, done.stderr
    line = json.loads(done.stderr.strip().splitlines()[-1])  # without a log pipe: its records on stderr
    assert "node cam of stream s cannot read the spec" in line["message"]
    assert "outputs[...]: object missing required field `base`" in line["message"] and "tatolab sdk" in line["message"]
    assert line["fields"]["cannot_run"] is True and (line["stream"], line["node"]) == ("s", "cam")
