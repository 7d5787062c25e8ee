"""The exposure and remote-link decisions, without processes."""

from __future__ import annotations

from dataclasses import dataclass, field

from tatolab._control.errors import Fix
from tatolab._control.words import render
from tatolab._runtime.rules.exposure import exposure_levels, resolve
from tatolab._runtime.machine import tailscale_name
from tatolab._naming import parse_address


@dataclass
class FakeSource:
    running: bool = True
    state: str = "kept"
    outputs: dict = field(default_factory=lambda: {("detector", "motion"): "private"})

    def has_output(self, node: str, port: str) -> bool:
        return (node, port) in self.outputs

    def exposure(self, node: str, port: str) -> str:
        return self.outputs[(node, port)]


ADDRESS = parse_address("motion_watcher/detector/motion")


def test_an_exposed_output_of_a_running_stream_is_wired():
    assert resolve(ADDRESS, "box", {"motion_watcher": FakeSource()}).state == "wired"
    public = FakeSource(outputs={("detector", "motion"): "public"})
    assert resolve(ADDRESS, "box", {"motion_watcher": public}).wired


def test_the_full_form_naming_this_machine_is_the_same_address():
    full = parse_address("box/motion_watcher/detector/motion")
    assert resolve(full, "box", {"motion_watcher": FakeSource()}).wired


def test_each_reason_for_waiting_is_named():
    assert "no stream named motion_watcher" in resolve(ADDRESS, "box", {}).reason.text
    stopped = FakeSource(running=False, state="stopped")
    assert "not running (stopped)" in resolve(ADDRESS, "box", {"motion_watcher": stopped}).reason.text
    other_port = FakeSource(outputs={("detector", "score"): "private"})
    assert "has no output detector/motion" in resolve(ADDRESS, "box", {"motion_watcher": other_port}).reason.text
    other_machine = parse_address("garage-pi/motion_watcher/detector/motion")
    assert "another machine (garage-pi)" in resolve(other_machine, "box", {"motion_watcher": FakeSource()}).reason.text


def test_an_internal_output_is_refused_with_how_to_expose_it():
    internal = FakeSource(outputs={("detector", "motion"): "internal"})
    result = resolve(ADDRESS, "box", {"motion_watcher": internal})
    assert not result.wired
    assert "is internal" in result.reason.text
    assert "stream_builder.expose" in result.reason.text
    assert result.reason.fixes == (Fix("expose", {"address": "motion_watcher/detector/motion"}, "exposes it"),)
    assert render(result.reason).endswith("'s stream function, or `tatolab expose motion_watcher/detector/motion`")


def test_exposure_levels_from_a_compiled_graph():
    graph = {"exposures": [{"node": "detector", "port": "motion", "level": "public"}]}
    assert exposure_levels(graph) == {("detector", "motion"): "public"}


def test_tailscale_name_prefers_the_dns_name():
    assert tailscale_name({"Self": {"DNSName": "garage-pi.tail1234.ts.net.", "HostName": "raspberrypi"}}) == "garage-pi"
    assert tailscale_name({"Self": {"HostName": "raspberrypi"}}) == "raspberrypi"
    assert tailscale_name({}) is None
