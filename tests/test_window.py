"""DisplayWindow: the docs' `bars` example in a real window on a private X server (Xvfb), several
windows and their scaling, a window closed from outside, and a stream with no display at all."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness import REPO, Runtime, make_project, read_jsonl, wait_for

from tatolab._builtins.screen import NoDisplay, display_named, placement
from tatolab._errors import ConfigError, GraphError
from tatolab._sdk.builder import StreamBuilder
from tatolab._sdk.builtins import DisplayWindow

BARS = [(255, 255, 255), (255, 255, 0), (0, 255, 255), (0, 255, 0),
        (255, 0, 255), (255, 0, 0), (0, 0, 255), (0, 0, 0)]


def test_fit_keeps_the_whole_frame_fill_cuts_its_edges_stretch_ignores_the_aspect():
    # 16:9 into a square: fit leaves black bars above and below, fill cuts the sides
    assert placement((1280, 720), (800, 800), "fit") == ((0, 175, 800, 450), (0.0, 0.0, 1.0, 1.0))
    viewport, (u0, v0, u1, v1) = placement((1280, 720), (800, 800), "fill")
    assert viewport == (0, 0, 800, 800) and (v0, v1) == (0.0, 1.0)
    assert (u0, u1) == pytest.approx((0.21875, 0.78125))  # the middle 720 of 1280 columns
    assert placement((1280, 720), (800, 800), "stretch") == ((0, 0, 800, 800), (0.0, 0.0, 1.0, 1.0))
    assert placement((640, 360), (1280, 720), "fit") == ((0, 0, 1280, 720), (0.0, 0.0, 1.0, 1.0))


def test_the_config_is_checked_when_the_stream_adds_the_window():
    builder = StreamBuilder("bars")
    handle = builder.add(DisplayWindow, config={"title": "preview", "width": 640, "height": 360, "scaling": "fill"})
    node = builder._graph()["nodes"][0]
    assert (handle.name, node["class"], node["builtin"]) == (
        "displaywindow", "tatolab._builtins.window:DisplayWindow", True)
    assert node["inputs"] == [{"port": "video", "delivery_profile": "newest"}]
    with pytest.raises(ConfigError, match="scaling must be one of fit, fill, stretch, got 'zoom'"):
        builder.add(DisplayWindow, config={"scaling": "zoom"}, name="bad")
    with pytest.raises(ConfigError, match="width must be a whole number of pixels"):
        builder.add(DisplayWindow, config={"width": 4}, name="bad")


def test_no_display_in_the_environment_is_said_with_what_to_set():
    with pytest.raises(NoDisplay, match="neither DISPLAY nor WAYLAND_DISPLAY is set"):
        display_named({"HOME": "/root"})
    assert display_named({"DISPLAY": ":3"}) == "DISPLAY=:3"
    assert display_named({"WAYLAND_DISPLAY": "wayland-0"}) == "WAYLAND_DISPLAY=wayland-0"
    assert display_named({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}) == "DISPLAY=:0"  # Xwayland


def test_a_dropped_bag_counts_as_dropped_on_its_link_not_read():
    import uuid

    from tatolab._bags import encode
    from tatolab._links import ring, shm
    from tatolab._host.ports import InputPort
    from tatolab._sdk.context import Inputs

    base = f"{shm.private_folder()}/test-{uuid.uuid4().hex}+n+p"
    ring.create_ring(base, slot_size=256, slot_count=8)
    try:
        writer = ring.RingWriter(base)
        reader = ring.RingReader(base, 0, "newest")
        port = InputPort("video", "newest")
        port.add_link("pattern/video->window/video", reader)
        inputs = Inputs("window", {"video": port})
        writer.write(encode({"n": 1}, node="pattern", port="video"))
        assert inputs.drop("video") is True and inputs.drop("video") is False
        writer.write(encode({"n": 2}, node="pattern", port="video"))
        assert inputs.read("video") == {"n": 2}
        counted = ring.read_counters(base)["readers"][0]
        assert (counted["read"], counted["dropped"]) == (1, 1)
        with pytest.raises(GraphError, match="node window has no input port 'audio'; its inputs are: video"):
            inputs.drop("audio")
        reader.close()
        writer.close()
    finally:
        ring.reap(base)


# ---- with a runtime and a real X server ------------------------------------------------------


@pytest.fixture
def xserver():
    from xserver import XServer

    try:
        server = XServer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


def _runtime_without_display(tmp_path: Path) -> Runtime:
    """A runtime started with no display of its own: a window can only get one from the command."""
    rt = Runtime(tmp_path / "rt")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "PYGLFW_LIBRARY_VARIANT"):
        rt.env.pop(name, None)
    return rt.start()


def _stop_clean(rt: Runtime) -> None:
    rt.end_commands()
    output = rt.stop()
    assert rt.leftover_processes() == [], output
    assert rt.shm_files() == [], f"shared-memory files left behind: {rt.shm_files()}"


def _graph_nodes(rt: Runtime, stream: str) -> dict[str, dict]:
    """The stream's nodes by name; {} while it is not loaded yet."""
    result = rt.cli("graph", "--stream", stream)
    if result.returncode != 0:
        return {}
    graph = json.loads(result.stdout)
    return {n["name"]: n for n in graph["streams"][0]["nodes"]} if graph["streams"] else {}


def _log(project: Path, stream: str) -> list[dict]:
    return read_jsonl(project / ".streamlib" / "logs" / f"{stream}.jsonl")


def _sample(image, x: int, y: int) -> tuple[int, int, int]:
    return image.getpixel((x, y))[:3]


def _bar_colours(image, top: int = 0, height: int | None = None) -> list[tuple[int, int, int]]:
    """The colour at the middle of each of the 8 bars, a quarter of the way down the picture."""
    height = image.height if height is None else height
    return [_sample(image, (2 * k + 1) * image.width // 16, top + height // 4) for k in range(8)]


@pytest.mark.slow
def test_the_docs_bars_example_shows_the_eight_bars_in_a_window(xserver, project_venv, tmp_path):
    rt = _runtime_without_display(tmp_path)
    project = tmp_path / "bars"
    shutil.copytree(REPO / "examples" / "bars", project, ignore=shutil.ignore_patterns(".venv", ".streamlib"))
    (project / ".venv").symlink_to(project_venv, target_is_directory=True)
    rt.popen_cli("run", cwd=project, env={**rt.env, "DISPLAY": xserver.display})

    window = xserver.window("bars/displaywindow")  # the default title: the node's address
    shot = wait_for(lambda: (lambda s: s if _bar_colours(s) == BARS else None)(xserver.screenshot(window)),
                    timeout=60, what="the window to show the eight bars")
    assert shot.size == (1280, 720)  # the pattern's own size, as no width or height was given
    for k, colour in enumerate(BARS):  # not just the middle: the whole width of each bar, top to bottom of the bars
        for x in ((k * 160) + 4, (k * 160) + 155):
            for y in (4, 300, 620):
                assert _sample(shot, x, y) == colour, (k, x, y)
    shot.save(tmp_path / "bars.png")
    window_node = wait_for(lambda: (lambda n: n if n["metrics"].get("shown", 0) > 0 else None)(
        _graph_nodes(rt, "bars")["displaywindow"]), timeout=30, what="the frames shown in the node's metrics")
    assert window_node["builtin"] is True and window_node["state"] == "running"
    assert window_node["inputs"][0]["read"] > 0
    assert window_node["metrics"]["window"] == "open" and window_node["metrics"]["title"] == "bars/displaywindow"
    assert (window_node["metrics"]["width"], window_node["metrics"]["height"]) == (1280, 720)
    _stop_clean(rt)


TWO_WINDOWS = '''
from tatolab.stream import DisplayWindow, StreamBuilder, TestPatternSource, stream


@stream
def two(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 30})
    fit = stream_builder.add(DisplayWindow, config={"title": "fit", "width": 400, "height": 400}, name="fit")
    fill = stream_builder.add(DisplayWindow, config={"title": "fill", "width": 400, "height": 400,
                                                     "scaling": "fill", "vsync": False}, name="fill")
    stream_builder.connect(pattern.output("video"), fit.input("video"))
    stream_builder.connect(pattern.output("video"), fill.input("video"))
'''


@pytest.mark.slow
def test_two_windows_scale_their_own_way_and_closing_one_leaves_the_stream_running(xserver, project_venv, tmp_path):
    rt = _runtime_without_display(tmp_path)
    project = make_project(tmp_path / "two", project_venv, {"stream.py": TWO_WINDOWS})
    rt.popen_cli("run", cwd=project, env={**rt.env, "DISPLAY": xserver.display})
    fit, fill = xserver.window("fit"), xserver.window("fill")
    xserver.move(fill, 500, 0)  # side by side: a screenshot sees only what is not covered

    # fit: 320x180 scaled to 400x225 in the middle of a 400x400 window, black above and below
    def fitted(shot):
        return shot if _bar_colours(shot, top=88, height=225) == BARS else None

    shot = wait_for(lambda: fitted(xserver.screenshot(fit)), timeout=60, what="the fit window's bars")
    assert _sample(shot, 200, 40) == (0, 0, 0) and _sample(shot, 200, 360) == (0, 0, 0)
    # fill: the middle 180 of 320 columns fill the window, from yellow at the left edge to blue at the right
    shot = wait_for(lambda: (lambda s: s if (_sample(s, 3, 100), _sample(s, 396, 100)) == (BARS[1], BARS[6]) else None)(
        xserver.screenshot(fill)), timeout=60, what="the fill window's bars")
    assert (_sample(shot, 185, 100), _sample(shot, 215, 100)) == (BARS[3], BARS[4])  # either side of the middle

    xserver.close(fill)  # its close button, as the window manager would press it
    wait_for(lambda: "fill" not in xserver.windows(), timeout=30, what="the fill window to go")
    closed = wait_for(lambda: [r for r in _log(project, "two") if "its window was closed" in r["message"]],
                      timeout=30, what="the closed window in the log")
    assert closed[0]["node"] == "fill" and closed[0]["level"] == "warning"
    assert "the stream goes on" in closed[0]["message"]

    before = _graph_nodes(rt, "two")
    after = wait_for(lambda: (lambda n: n if n["fill"]["inputs"][0]["dropped"] >= before["fill"]["inputs"][0]["dropped"] + 10
                              and n["fit"]["inputs"][0]["read"] >= before["fit"]["inputs"][0]["read"] + 10 else None)(
        _graph_nodes(rt, "two")), timeout=30, what="frames dropped by the closed window and shown by the other")
    assert after["fill"]["inputs"][0]["read"] == before["fill"]["inputs"][0]["read"]  # none shown any more
    assert {name: (n["state"], n["restarts"]) for name, n in after.items()} == {
        "testpatternsource": ("running", 0), "fit": ("running", 0), "fill": ("running", 0)}
    assert (after["fill"]["metrics"]["window"], after["fit"]["metrics"]["window"]) == ("closed", "open")
    assert "fit" in xserver.windows()
    _stop_clean(rt)


ONE_WINDOW = '''
from tatolab.stream import DisplayWindow, StreamBuilder, TestPatternSource, stream


@stream
def one(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={"width": 160, "height": 90, "fps": 30})
    window = stream_builder.add(DisplayWindow, config={"title": "one"}, name="window")
    stream_builder.connect(pattern.output("video"), window.input("video"))
'''


@pytest.mark.slow
def test_a_window_destroyed_from_outside_is_logged_and_the_stream_goes_on(xserver, project_venv, tmp_path):
    rt = _runtime_without_display(tmp_path)
    project = make_project(tmp_path / "one", project_venv, {"stream.py": ONE_WINDOW})
    rt.popen_cli("run", cwd=project, env={**rt.env, "DISPLAY": xserver.display})
    window = xserver.window("one")
    wait_for(lambda: _bar_colours(xserver.screenshot(window)) == BARS, timeout=60, what="the bars")
    xserver.destroy(window)  # xdotool windowclose: Xlib's default handler would end the process at the next draw
    closed = wait_for(lambda: [r for r in _log(project, "one") if "its window was closed" in r["message"]],
                      timeout=30, what="the destroyed window in the log")
    assert closed[0]["node"] == "window"
    before = _graph_nodes(rt, "one")["window"]["inputs"][0]
    nodes = wait_for(lambda: (lambda n: n if n["window"]["inputs"][0]["dropped"] >= before["dropped"] + 10 else None)(
        _graph_nodes(rt, "one")), timeout=30, what="frames counted as dropped")
    assert nodes["window"]["inputs"][0]["read"] == before["read"]
    assert {name: (n["state"], n["restarts"]) for name, n in nodes.items()} == {
        "testpatternsource": ("running", 0), "window": ("running", 0)}
    _stop_clean(rt)


@pytest.mark.slow
def test_a_window_whose_connection_is_killed_comes_back_and_the_stream_goes_on(xserver, project_venv, tmp_path):
    rt = _runtime_without_display(tmp_path)
    project = make_project(tmp_path / "one", project_venv, {"stream.py": ONE_WINDOW})
    rt.popen_cli("run", cwd=project, env={**rt.env, "DISPLAY": xserver.display})
    window = xserver.window("one")
    pid = wait_for(lambda: _graph_nodes(rt, "one").get("window", {}).get("pid"), timeout=30, what="the window's pid")
    xserver.kill_client(window)  # xkill: no process survives losing its X connection inside Xlib
    said = wait_for(lambda: [r for r in _log(project, "one") if "connection to the display was closed" in r["message"]],
                    timeout=30, what="the lost connection in the log")
    assert said[0]["node"] == "window"
    node = wait_for(lambda: (lambda n: n if n["restarts"] == 1 and n["state"] == "running" and n["pid"] != pid else None)(
        _graph_nodes(rt, "one")["window"]), timeout=60, what="the window's node started again")
    again = xserver.window("one")  # the X server may give the new window the old one's id: the pid tells them apart
    wait_for(lambda: _bar_colours(xserver.screenshot(again)) == BARS, timeout=60, what="the bars in the new window")
    assert _graph_nodes(rt, "one")["testpatternsource"]["restarts"] == 0 and node["builtin"] is True
    _stop_clean(rt)


def _bars_in_a_row(image) -> bool:
    """The eight bars side by side somewhere in the picture (a window the compositor placed itself)."""
    import numpy as np

    pixels = np.asarray(image.convert("RGB"))
    for row in pixels[::8]:
        edges = np.flatnonzero((row[1:] != row[:-1]).any(axis=1)) + 1
        starts, ends = np.concatenate(([0], edges)), np.concatenate((edges, [len(row)]))
        runs = [tuple(int(v) for v in row[a]) for a, b in zip(starts, ends) if b - a >= 8]
        if any(runs[i:i + 8] == BARS for i in range(len(runs) - 7)):
            return True
    return False


@pytest.mark.slow
def test_on_wayland_alone_the_bars_show_in_a_window(xserver, project_venv, tmp_path):
    # weston nested in the private X server: a Wayland compositor with a seat, seen through Xvfb
    if shutil.which("weston") is None:
        pytest.skip("weston is not installed (apt-get install weston; .ci/run does)")
    runtime_dir = tmp_path / "wayland"
    runtime_dir.mkdir(mode=0o700)
    weston = subprocess.Popen(
        ["weston", "--backend=x11-backend.so", "--use-pixman", "--socket=tatolab-test", "--width=1200",
         "--height=780", "--idle-time=0"],
        env={**os.environ, "DISPLAY": xserver.display, "XDG_RUNTIME_DIR": str(runtime_dir)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (runtime_dir / "tatolab-test").exists(), timeout=30, what="weston's socket")
        rt = _runtime_without_display(tmp_path)
        project = tmp_path / "bars"
        shutil.copytree(REPO / "examples" / "bars", project, ignore=shutil.ignore_patterns(".venv", ".streamlib"))
        (project / ".venv").symlink_to(project_venv, target_is_directory=True)
        rt.popen_cli("run", cwd=project, env={**rt.env, "WAYLAND_DISPLAY": str(runtime_dir / "tatolab-test")})
        root = xserver.x.screen().root
        wait_for(lambda: _bars_in_a_row(xserver.screenshot(root)), timeout=60, what="the bars on weston's screen")
        opened = [r["message"] for r in _log(project, "bars") if "window 'bars/displaywindow' open" in r["message"]]
        assert opened and "on WAYLAND_DISPLAY=" in opened[0]
        _stop_clean(rt)
    finally:
        os.killpg(weston.pid, signal.SIGTERM)
        weston.wait(timeout=20)


SLOW_SOURCE = '''
from tatolab.stream import DisplayWindow, StreamBuilder, TestPatternSource, stream


@stream
def slow(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 0.02})
    window = stream_builder.add(DisplayWindow, config={"title": "slow"}, name="window")
    stream_builder.connect(pattern.output("video"), window.input("video"))
'''


@pytest.mark.slow
def test_between_frames_the_window_redraws_when_resized_and_closes_when_asked(xserver, project_venv, tmp_path):
    # one frame every 50 s: whatever the window does before the second, it does between frames
    rt = _runtime_without_display(tmp_path)
    project = make_project(tmp_path / "slow", project_venv, {"stream.py": SLOW_SOURCE})
    rt.popen_cli("run", cwd=project, env={**rt.env, "DISPLAY": xserver.display})
    window = xserver.window("slow")
    wait_for(lambda: _bar_colours(xserver.screenshot(window)) == BARS, timeout=30, what="the first frame")
    window.configure(width=640, height=540)  # fit: the bars 640x360, in the middle
    xserver.x.sync()
    wait_for(lambda: _bar_colours(xserver.screenshot(window), top=90, height=360) == BARS, timeout=30,
             what="the last frame drawn again at the new size")
    xserver.close(window)
    wait_for(lambda: "slow" not in xserver.windows(), timeout=30, what="the window to close")
    assert _graph_nodes(rt, "slow")["window"]["inputs"][0]["read"] == 1  # all of it with the first frame alone
    _stop_clean(rt)


NO_DISPLAY = '''
from tatolab.stream import DisplayWindow, StreamBuilder, TestPatternSource, stream


@stream
def headless(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={"width": 160, "height": 90, "fps": 60})
    window = stream_builder.add(DisplayWindow, name="window")
    stream_builder.connect(pattern.output("video"), window.input("video"))
'''


@pytest.mark.slow
@pytest.mark.parametrize("display, reason", [
    (None, "neither DISPLAY nor WAYLAND_DISPLAY is set"),
    (":4242", "the display could not be opened (DISPLAY=:4242)"),  # nothing listens there
])
def test_with_no_display_the_window_says_so_once_and_counts_the_frames_it_drops(display, reason, project_venv, tmp_path):
    rt = _runtime_without_display(tmp_path)
    project = make_project(tmp_path / "headless", project_venv, {"stream.py": NO_DISPLAY})
    env = dict(rt.env) if display is None else {**rt.env, "DISPLAY": display}
    rt.popen_cli("run", cwd=project, env=env)
    nodes = wait_for(lambda: (lambda n: n if n and n["window"]["inputs"][0]["dropped"] >= 60
                              and n["window"]["metrics"].get("dropped_without_window", 0) >= 30 else None)(
        _graph_nodes(rt, "headless")), timeout=60, what="a second of frames dropped by the window")
    metrics = nodes["window"]["metrics"]
    assert metrics["window"] == "no display" and metrics["reason"].startswith(reason) and metrics["shown"] == 0
    assert nodes["window"]["inputs"][0]["read"] == 0
    # one clear state, looked at again every few seconds: no restart, no second line
    assert {name: (n["state"], n["restarts"]) for name, n in nodes.items()} == {
        "testpatternsource": ("running", 0), "window": ("waiting", 0)}
    assert nodes["window"]["reason"].startswith(f"node window shows no window: {reason}")
    said = [r for r in _log(project, "headless") if r["node"] == "window" and r["level"] in ("warning", "error")]
    assert len(said) == 1, said
    assert said[0]["message"].startswith(f"node window shows no window: {reason}")
    assert "counted as dropped" in said[0]["message"] and said[0]["message"].endswith("; waiting, checked every 3 s")
    _stop_clean(rt)
