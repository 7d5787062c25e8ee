"""CameraSource (a V4L2 camera or an FFmpeg input), VirtualCameraSink (v4l2loopback), the one-stream-
per-camera rule, and `tatolab enable-virtual-camera`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from harness import BIN, Runtime, make_project, read_jsonl, wait_for
from tatolab._media import v4l2
from tatolab._control.words import render
from tatolab._runtime.rules import cameras
from tatolab._sdk.builder import StreamBuilder
from tatolab._sdk.builtins import CameraSource, CameraSourceConfig, VirtualCameraSinkConfig

# the machine's one v4l2loopback camera: its tests run in turn on one worker (pytest-xdist's loadgroup)
pytestmark = pytest.mark.xdist_group("camera")

RECORDER = '''
import json
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@node
class Recorder:
    """Writes what each frame is to frames.jsonl: size, timestamp and the colour at its centre."""

    @node.input(delivery_profile="ordered")
    def video(self) -> dict: ...

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        pixels = frame.cpu()
        with open("frames.jsonl", "a") as f:
            f.write(json.dumps({"width": frame.width, "height": frame.height, "format": frame.format,
                                "timestamp_ns": frame.timestamp_ns, "index": frame.fields.get("frame_index"),
                                "centre": pixels[frame.height // 2, frame.width // 2].tolist(),
                                "top_left": pixels[2, 2].tolist()}) + "\\n")
'''


def _camera_project(path: Path, venv: Path, stream: str, config: dict, recorder: bool = True) -> Path:
    lines = [
        "from tatolab.stream import CameraSource, StreamBuilder, stream",
        "from nodes.recorder import Recorder" if recorder else "",
        "",
        "",
        "@stream",
        f"def {stream}(stream_builder: StreamBuilder) -> None:",
        f"    camera = stream_builder.add(CameraSource, config={config!r}, name=\"camera\")",
    ]
    if recorder:
        lines += ["    recorder = stream_builder.add(Recorder, name=\"recorder\")",
                  "    stream_builder.connect(camera.output(\"video\"), recorder.input(\"video\"))"]
    return make_project(path, venv, {"stream.py": "\n".join(lines) + "\n", "nodes/__init__.py": "",
                                     "nodes/recorder.py": RECORDER})


def _frames(project: Path, count: int, what: str, timeout: float = 60) -> list[dict]:
    try:
        return wait_for(lambda: (lambda rows: rows if len(rows) >= count else None)(
            read_jsonl(project / "frames.jsonl")), timeout=timeout, what=what)
    except AssertionError as exc:
        got = len(read_jsonl(project / "frames.jsonl"))
        raise AssertionError(f"{exc} (got {got}); the stream's log:\n" +
                             "\n".join(f"{r.get('node')}: {r['message']}" for r in _log(project))) from None


def graph_node(runtime: Runtime, stream: str, name: str) -> dict:
    """The node's entry in `graph`, or {} while its stream is not loaded yet."""
    graph = json.loads(runtime.cli("graph", check=True).stdout)
    return next((n for s in graph["streams"] if s["name"] == stream for n in s["nodes"] if n["name"] == name), {})


def _log(project: Path) -> list[dict]:
    return [r for f in sorted((project / ".streamlib" / "logs").glob("*.jsonl")) for r in read_jsonl(f)]


COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255), (255, 0, 255),
           (255, 255, 255), (40, 80, 120)]


def _clip(path: Path, fps: int = 20) -> None:
    """A lossless clip (FFV1) of one solid colour a frame, COLOURS in order, written with PyAV."""
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        video = container.add_stream("ffv1", rate=fps)
        video.width, video.height, video.pix_fmt = 96, 64, "bgr0"
        for rgb in COLOURS:
            image = np.zeros((64, 96, 3), np.uint8)
            image[...] = rgb
            container.mux(video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(video.encode())


# -- without a runtime ----------------------------------------------------------------------------------


def test_the_pyav_wheel_reads_cameras_test_sources_and_the_camera_formats():
    import av
    import av.filter

    assert "video4linux2,v4l2" in av.formats_available
    assert "lavfi" in av.formats_available and "testsrc2" in av.filter.filters_available
    assert {"mjpeg", "rawvideo"} <= av.codecs_available  # MJPEG cameras; YUYV and NV12 are raw video
    for pixel_format in ("yuyv422", "nv12"):
        frame = av.VideoFrame(64, 36, pixel_format).reformat(format="rgba")
        assert frame.to_ndarray().shape == (36, 64, 4)


def test_camera_config_is_checked_when_the_stream_adds_it():
    builder = StreamBuilder("s")
    for config, words in (({"device": "/dev/video0", "source": "x.mp4"}, "not both"),
                          ({"pixel_format": "h264"}, "yuyv422, mjpeg, nv12"),
                          ({"width": 640}, "width and height together"),
                          ({"fallback": "black"}, "test_pattern")):
        with pytest.raises(Exception, match=words):
            builder.add(CameraSource, config=config, name="c")
    assert CameraSourceConfig(device=2).device == 2


def _graph(*configs: dict) -> dict:
    return {"nodes": [{"name": f"cam{i}", "class": cameras.CAMERA_CLASS, "builtin": True, "config": c}
                      for i, c in enumerate(configs)]}


def test_a_camera_held_by_one_stream_is_refused_to_another_naming_the_holder():
    resolve = {None: "/dev/video0", 0: "/dev/video0", "/dev/video0": "/dev/video0", 1: "/dev/video1"}.get
    held, _ = cameras.cameras_of("motion_watcher", _graph({}), resolve)
    loading, missing = cameras.cameras_of("motion_watcher_dev", _graph({"device": 0}), resolve)
    refused = cameras.refusal("motion_watcher_dev", loading, missing, held)
    assert refused is not None and refused.code == "camera_held"
    assert render(refused) == (
        "stream motion_watcher_dev cannot open the camera /dev/video0 (node cam0): the stream motion_watcher has "
        "it open (node cam0), and only one stream at a time can open a camera; stop the stream that holds it "
        "with `tatolab stop motion_watcher`")
    other, _ = cameras.cameras_of("second", _graph({"device": 1}), resolve)
    assert cameras.refusal("second", other, [], held) is None  # another camera is free
    files, none = cameras.cameras_of("f", _graph({"source": "clip.mp4"}), resolve)
    assert files == [] and none == []  # an FFmpeg input opens no camera
    twice, _ = cameras.cameras_of("t", _graph({}, {"device": "/dev/video0"}), resolve)
    assert cameras.refusal("t", twice, [], []).code == "camera_twice"


def test_a_camera_that_does_not_exist_is_refused_unless_the_stream_falls_back():
    loading, missing = cameras.cameras_of("s", _graph({"device": "/dev/video9"}), lambda device: None)
    refused = cameras.refusal("s", loading, missing, [])
    assert refused.code == "camera_missing"
    assert "node cam0 (CameraSource)" in refused.message and "no camera /dev/video9" in refused.message
    loading, missing = cameras.cameras_of("s", _graph({"fallback": "test_pattern"}), lambda device: None)
    assert cameras.refusal("s", loading, missing, []) is None


def test_enable_virtual_camera_print_gives_the_commands_and_runs_none():
    result = subprocess.run([str(BIN / "tatolab"), "enable-virtual-camera", "--print"], capture_output=True,
                            text=True, check=True)
    lines = result.stdout.splitlines()
    if not v4l2.loopback_module_loaded():
        modprobe = next(line for line in lines if "modprobe v4l2loopback" in line)
        assert "devices=1" in modprobe and "card_label=Tatolab" in modprobe and "exclusive_caps=1" in modprobe
        assert "video_nr=" in modprobe
    assert any("/etc/modules-load.d/tatolab-virtual-camera.conf" in line for line in lines)
    assert any("'options v4l2loopback devices=1" in line and "/etc/modprobe.d/" in line for line in lines)
    assert not Path("/etc/modprobe.d/tatolab-virtual-camera.conf").exists() or v4l2.loopback_module_loaded()


def _kernel_has_v4l2loopback() -> bool:
    from tatolab._cli.camera import module_available

    return module_available()


@pytest.mark.skipif(_kernel_has_v4l2loopback(), reason="this kernel has v4l2loopback: the command would load it")
def test_enable_virtual_camera_on_a_kernel_without_v4l2loopback_says_how_to_get_it():
    result = subprocess.run([str(BIN / "tatolab"), "enable-virtual-camera"], capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout == ""
    assert "has no v4l2loopback module, so there can be no virtual camera" in result.stderr
    assert "`sudo apt-get install v4l2loopback-dkms`" in result.stderr
    assert "then run `tatolab enable-virtual-camera` again" in result.stderr


@pytest.mark.skipif(v4l2.loopbacks() != [], reason="this machine has a v4l2loopback device")
def test_without_v4l2loopback_the_virtual_camera_says_what_to_do():
    from tatolab._builtins.virtual_camera import missing_device

    device, why = missing_device(VirtualCameraSinkConfig())
    assert device is None and "v4l2loopback" in why and "`sudo tatolab enable-virtual-camera`" in why


def _centres(frames: list[dict]):
    """An on_write for run_node: each frame as written (its size, stamp and the colour at its centre),
    looked at before its surface is reused."""
    from tatolab._surfaces.frame import VideoFrame

    def seen(port: str, bag: dict) -> None:
        frame = VideoFrame.open(bag)
        pixels = frame.cpu()
        frames.append({"size": (frame.width, frame.height), "timestamp_ns": frame.timestamp_ns,
                       "centre": tuple(pixels[frame.height // 2, frame.width // 2, :3].tolist())})
        del pixels
        frame.release()
    return seen


@pytest.fixture
def pool():
    import os
    import uuid

    from tatolab._links import ring, shm
    from tatolab._surfaces import pool as surfaces

    base = f"{shm.private_folder()}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}+surfaces"
    surfaces.create(base, slots=6)
    surfaces.configure(base)
    yield
    surfaces.configure(None)
    ring.reap(base)


def _camera_format_clip(path: Path, codec: str, pixel_format: str) -> None:
    """COLOURS as a camera sends them: raw YUYV or NV12, or MJPEG."""
    import av
    import numpy as np

    with av.open(str(path), "w", format="nut") as container:
        video = container.add_stream(codec, rate=30)
        video.width, video.height, video.pix_fmt = 96, 64, pixel_format
        for rgb in COLOURS:
            image = np.zeros((64, 96, 3), np.uint8)
            image[...] = rgb
            container.mux(video.encode(av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format=pixel_format)))
        container.mux(video.encode())


@pytest.mark.parametrize("codec, pixel_format, tolerance", [
    ("rawvideo", "yuyv422", 6), ("rawvideo", "nv12", 6), ("mjpeg", "yuvj422p", 12)])
def test_camera_formats_become_rgba_frames_of_the_same_colours(pool, tmp_path, monkeypatch, codec, pixel_format,
                                                                 tolerance):
    from tatolab._builtins.camera import CameraSource as CameraCode
    from tatolab.testing import run_node

    monkeypatch.chdir(tmp_path)  # a node runs in its project's folder
    _camera_format_clip(tmp_path / "camera.nut", codec, pixel_format)
    frames: list[dict] = []
    run = run_node(CameraCode, {"source": "camera.nut", "width": 48, "height": 32}, node="camera",
                   on_write=_centres(frames), timeout=30)  # run() returns at the end of the file
    assert any("end of file camera.nut" in m for m in run.messages()), run.messages()
    assert [f["size"] for f in frames] == [(48, 32)] * len(COLOURS)
    for frame, rgb in zip(frames, COLOURS):
        assert all(abs(got - want) <= tolerance for got, want in zip(frame["centre"], rgb)), (frame, rgb)
    stamps = [f["timestamp_ns"] for f in frames]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))


def test_a_source_that_is_no_file_url_or_test_source_is_said_by_name_once(pool, tmp_path, monkeypatch):
    from tatolab._builtins import camera
    from tatolab.testing import run_node

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(camera, "RETRY_S", 0.01)  # retried quickly, and still said once
    tries = []
    opening = camera.ffmpeg_input
    monkeypatch.setattr(camera, "ffmpeg_input", lambda source: tries.append(source) or opening(source))
    run = run_node(camera.CameraSource, {"source": "holiday.mp4"}, node="camera", until=lambda run: len(tries) >= 5,
                   timeout=30)  # then ctx.stopping is set, and run() returns
    assert len(tries) >= 5
    errors = run.messages("error")
    assert len(errors) == 1, run.logs
    assert errors[0].startswith(f"node camera: source 'holiday.mp4' is no file in {tmp_path}, no URL and no "
                                "FFmpeg test source")
    assert errors[0].endswith("; waiting, checked every 0.01 s")
    assert run.metrics["waiting"].startswith("node camera: source 'holiday.mp4' is no file in")  # graph: waiting
    assert run.outputs == {"video": []}


def test_the_virtual_cameras_format_is_asked_in_the_kernels_layout(monkeypatch):
    import struct

    asked = []

    def ioctl(fd, request, buffer):  # a device that takes what it is asked, as v4l2loopback does
        asked.append((request, bytes(buffer)))

    monkeypatch.setattr(v4l2.fcntl, "ioctl", ioctl)
    assert v4l2.set_output_format(7, 640, 360, "yuyv422") == 640 * 2 * 360
    request, buffer = asked[0]
    # linux/videodev2.h: VIDIOC_S_FMT, struct v4l2_format (208 bytes), v4l2_pix_format at offset 8
    assert request == 0xC0D05605 and len(buffer) == 208
    assert struct.unpack_from("I", buffer, 0) == (2,)  # V4L2_BUF_TYPE_VIDEO_OUTPUT
    assert struct.unpack_from("II4sIII", buffer, 8) == (640, 360, b"YUYV", 1, 1280, 1280 * 360)

    def stubborn(fd, request, buffer):  # a device that keeps its own size
        struct.pack_into("II", buffer, 8, 320, 240)

    monkeypatch.setattr(v4l2.fcntl, "ioctl", stubborn)
    with pytest.raises(OSError, match="took 320x240"):
        v4l2.set_output_format(7, 640, 360, "rgb24")


def test_the_virtual_camera_writes_each_frame_in_the_format_asked(pool, tmp_path, monkeypatch):
    import av
    import numpy as np

    from tatolab._builtins import virtual_camera
    from tatolab._sdk.nodes import create
    from tatolab._surfaces.frame import VideoFrame
    from tatolab.testing import FakeContext

    device = tmp_path / "video10"  # stands in for a v4l2loopback device: the frames land in this file
    device.write_bytes(b"")
    formats = []
    monkeypatch.setattr(v4l2, "query", lambda path: v4l2.Capability(v4l2.LOOPBACK_DRIVER, "Tatolab", 2))
    monkeypatch.setattr(v4l2, "set_output_format", lambda fd, w, h, f: formats.append((w, h, f)) or 0)
    node = create(virtual_camera.VirtualCameraSink, {"device": str(device), "width": 32, "height": 16}, node="vcam")
    image = np.zeros((36, 64, 4), np.uint8)
    image[..., :3], image[..., 3] = (200, 40, 90), 255
    ctx = FakeContext(virtual_camera.VirtualCameraSink, node="vcam")
    node.setup(ctx)
    for _ in range(2):  # two frames, one call each (a newest input: one fed at a time)
        ctx.feed("video", VideoFrame.from_numpy(image))
        node.process(ctx)
    node.teardown(ctx)
    assert formats == [(32, 16, "yuyv422")]  # asked once, at the size other applications see
    written = device.read_bytes()
    assert len(written) == 2 * 32 * 2 * 16
    back = av.VideoFrame.from_ndarray(np.frombuffer(written[:32 * 2 * 16], np.uint8).reshape(16, 32, 2),
                                      format="yuyv422").to_ndarray(format="rgb24")
    assert np.abs(back.astype(int) - (200, 40, 90)).max() <= 6
    assert ctx.run.messages("error") == [], ctx.run.logs


def test_a_camera_frame_keeps_the_drivers_monotonic_capture_time_and_no_other_clock():
    import time
    import types
    from fractions import Fraction

    from tatolab._builtins.camera import captured_ns

    micro = Fraction(1, 1_000_000)
    taken = time.monotonic_ns() // 1000 - 20_000  # V4L2 stamped it 20 ms ago, in microseconds
    assert captured_ns(types.SimpleNamespace(pts=taken, time_base=micro)) == taken * 1000
    # a driver on the wall clock, or a stamp from long ago: the node stamps the frame as it arrives
    assert captured_ns(types.SimpleNamespace(pts=time.time_ns() // 1000, time_base=micro)) is None
    assert captured_ns(types.SimpleNamespace(pts=taken - 5_000_000, time_base=micro)) is None
    assert captured_ns(types.SimpleNamespace(pts=3, time_base=Fraction(1, 30))) is None


# -- with a runtime --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_camera_source_plays_a_file_in_order_at_its_own_pace(runtime, video_venv, tmp_path):
    project = _camera_project(tmp_path / "clip", video_venv, "clip", {"source": "clip.mkv"})
    _clip(project / "clip.mkv", fps=20)
    runtime.popen_cli("run", cwd=project)
    rows = _frames(project, len(COLOURS), "every frame of the clip")
    assert [tuple(r["centre"][:3]) for r in rows] == COLOURS  # each frame's own colour, in order, none twice
    assert all(r["centre"][3] == 255 and (r["width"], r["height"], r["format"]) == (96, 64, "rgba8") for r in rows)
    stamps = [r["timestamp_ns"] for r in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert stamps[-1] - stamps[0] >= 0.9 * (len(COLOURS) - 1) / 20 * 1e9  # its own pace, 20 fps, not at once
    # the source says so once it has read past its last frame, which may come after the sink wrote it
    wait_for(lambda: any("end of file clip.mkv (8 frames)" in r["message"] for r in _log(project)), timeout=30,
             what="the log's end-of-file line")


@pytest.mark.slow
def test_camera_source_reads_an_ffmpeg_test_source_at_the_size_asked(runtime, video_venv, tmp_path):
    project = _camera_project(tmp_path / "lavfi", video_venv, "lavfi",
                              {"source": "testsrc2=size=320x240:rate=30", "width": 160, "height": 120})
    runtime.popen_cli("run", cwd=project)
    rows = _frames(project, 5, "five frames of testsrc2")
    assert {(r["width"], r["height"]) for r in rows} == {(160, 120)}
    stamps = [r["timestamp_ns"] for r in rows]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))
    assert [r["index"] for r in rows] == list(range(len(rows)))
    assert len({tuple(r["centre"]) for r in rows} | {tuple(r["top_left"]) for r in rows}) > 1  # a picture, not blank


@pytest.mark.slow
def test_a_second_stream_opening_the_same_camera_is_refused_naming_the_holder(runtime, video_venv, tmp_path):
    # /dev/null stands in for a camera here (the rule compares devices; this one cannot stream)
    first = _camera_project(tmp_path / "first", video_venv, "first", {"device": "/dev/null"}, recorder=False)
    second = _camera_project(tmp_path / "second", video_venv, "second", {"device": "/dev/null"}, recorder=False)
    make_project(tmp_path / "pattern", video_venv, {"stream.py": """
        from tatolab.stream import StreamBuilder, TestPatternSource, stream


        @stream
        def pattern(stream_builder: StreamBuilder) -> None:
            stream_builder.add(TestPatternSource, config={"width": 64, "height": 36, "fps": 10})
    """})
    runtime.popen_cli("run", cwd=first)
    # a device that cannot be opened is said by name, in the log and in `graph`
    node = wait_for(lambda: (lambda n: n if n.get("last_error") else None)(graph_node(runtime, "first", "camera")),
                    timeout=60, what="the camera's error in graph")
    assert "camera /dev/null" in node["last_error"] and node["state"] != "failed"
    refused = runtime.cli("run", cwd=second, timeout=60)
    assert refused.returncode != 0
    assert ("stream second cannot open the camera /dev/null (node camera): the stream first has it open "
            "(node camera)") in refused.stderr
    assert "`tatolab stop first`" in refused.stderr
    assert runtime.stream_names() == ["first"]  # the holder runs on
    # nor can a running stream add a node opening it
    runtime.popen_cli("run", cwd=tmp_path / "pattern")
    wait_for(lambda: "pattern" in runtime.stream_names(), timeout=60, what="the pattern stream")
    added = runtime.cli("node", "add", "pattern", "camera", "CameraSource", "--config", '{"device": "/dev/null"}')
    assert added.returncode != 0
    assert "cannot open the camera /dev/null (node camera): the stream first has it open" in added.stderr
    assert "`tatolab stop first`" in added.stderr
    runtime.cli("stop", "pattern", check=True)
    runtime.cli("stop", "first", check=True)
    runtime.popen_cli("run", cwd=second)  # the fix works
    wait_for(lambda: runtime.stream_names() == ["second"], timeout=60, what="second to load once first stopped")


@pytest.mark.slow
def test_a_stream_of_another_runtime_waits_for_the_camera_naming_the_holder(runtime, video_venv, tmp_path):
    # two runtimes of one user (other state folders): the camera's lock, not the load rule, keeps them apart
    other = Runtime(tmp_path / "rt2").start()
    first = _camera_project(tmp_path / "first", video_venv, "first", {"device": "/dev/null"}, recorder=False)
    second = _camera_project(tmp_path / "second", video_venv, "second", {"device": "/dev/null"}, recorder=False)
    runtime.popen_cli("run", cwd=first)
    wait_for(lambda: "camera /dev/null refused" in (graph_node(runtime, "first", "camera").get("last_error") or ""),
             timeout=60, what="first to hold the camera (and find /dev/null no camera)")
    other.popen_cli("run", cwd=second)
    node = wait_for(lambda: (lambda n: n if n.get("last_error") else None)(graph_node(other, "second", "camera")),
                    timeout=60, what="second's camera error")
    assert ("camera /dev/null is held by the stream first/camera of another Tatolab runtime of yours"
            in node["last_error"]), node
    runtime.cli("stop", "first", check=True)  # the lock goes with first's node process
    wait_for(lambda: "camera /dev/null refused" in (graph_node(other, "second", "camera").get("last_error") or ""),
             timeout=60, what="second to take the camera once first stopped")
    other.end_commands()
    output = other.stop()
    assert other.leftover_processes() == [], output


@pytest.mark.slow
def test_a_camera_that_does_not_exist_is_refused_by_name(runtime, video_venv, tmp_path):
    project = _camera_project(tmp_path / "gone", video_venv, "gone", {"device": "/dev/video97"}, recorder=False)
    refused = runtime.cli("run", cwd=project, timeout=60)
    assert refused.returncode != 0
    assert "node camera (CameraSource) asks for a camera and there is no camera /dev/video97" in refused.stderr
    assert runtime.stream_names() == []


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="making a stand-in camera device (mknod) needs root")
def test_a_kept_streams_camera_missing_when_the_runtime_starts_is_waited_for_not_failed(tmp_path, video_venv):
    # at boot a USB camera may come after the runtime: the kept stream loads, its node waits
    camera = tmp_path / "video0"
    os.mknod(camera, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a character device, as /dev/null is
    project = _camera_project(tmp_path / "watch", video_venv, "watch", {"device": str(camera)}, recorder=False)
    runtime = Runtime(tmp_path / "rt").start()
    try:
        runtime.cli("run", "-d", cwd=project, check=True)
        runtime.stop()
        camera.unlink()
        runtime.start()  # loading what it keeps, it waits for the camera
        node = wait_for(lambda: (lambda n: n if n.get("last_error") else None)(graph_node(runtime, "watch", "camera")),
                        timeout=60, what="the camera's error in graph")
        assert str(camera) in node["last_error"] and node["state"] != "failed"
        assert "failed" not in runtime.cli("streams", check=True).stdout
        refused = runtime.cli("run", "--name", "again", cwd=project, timeout=60)  # asked for by hand: refused
        assert f"there is no camera {camera}" in refused.stderr
    finally:
        runtime.stop()
    assert runtime.leftover_processes() == [] and runtime.shm_files() == []


@pytest.mark.slow
@pytest.mark.skipif(v4l2.loopbacks() != [], reason="this machine has a v4l2loopback device")
def test_virtual_camera_sink_without_v4l2loopback_is_refused_by_name_and_the_stream_runs_on(
        runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "virtual", video_venv, {"stream.py": '''
        from tatolab.stream import StreamBuilder, TestPatternSource, VirtualCameraSink, stream


        @stream
        def virtual(stream_builder: StreamBuilder) -> None:
            pattern = stream_builder.add(TestPatternSource, config={"width": 64, "height": 36, "fps": 30})
            sink = stream_builder.add(VirtualCameraSink, name="virtual_camera")
            stream_builder.connect(pattern.output("video"), sink.input("video"))
    '''})
    runtime.popen_cli("run", cwd=project)
    node = wait_for(lambda: (lambda n: n if n.get("last_error") else None)(
        graph_node(runtime, "virtual", "virtual_camera")), timeout=60, what="the sink's error in graph")
    assert "node virtual_camera (VirtualCameraSink)" in node["last_error"]
    assert "v4l2loopback" in node["last_error"] and "`sudo tatolab enable-virtual-camera`" in node["last_error"]
    said = [r for r in _log(project) if r.get("node") == "virtual_camera" and r["level"] == "error"]
    assert len(said) == 1, said  # once, not once a frame
    graph = json.loads(runtime.cli("graph", "--stream", "virtual", check=True).stdout)
    assert all(n["state"] == "running" for n in graph["streams"][0]["nodes"]), graph


@pytest.mark.slow
@pytest.mark.skipif(not v4l2.loopbacks(), reason="this kernel has no v4l2loopback device "
                    "(`tatolab enable-virtual-camera` sets one up)")
def test_camera_source_reads_what_a_virtual_camera_writes(runtime, video_venv, tmp_path):
    device = str(v4l2.loopbacks()[0])
    project = make_project(tmp_path / "loop", video_venv, {
        "stream.py": f'''
            from tatolab.stream import CameraSource, StreamBuilder, TestPatternSource, VirtualCameraSink, stream
            from nodes.recorder import Recorder


            @stream
            def writer(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={{"width": 320, "height": 240, "fps": 30}})
                sink = stream_builder.add(VirtualCameraSink, config={{"device": {device!r}}})
                stream_builder.connect(pattern.output("video"), sink.input("video"))


            @stream
            def reader(stream_builder: StreamBuilder) -> None:
                camera = stream_builder.add(CameraSource, config={{"device": {device!r}}}, name="camera")
                recorder = stream_builder.add(Recorder, name="recorder")
                stream_builder.connect(camera.output("video"), recorder.input("video"))
        ''',
        "nodes/__init__.py": "", "nodes/recorder.py": RECORDER})
    runtime.popen_cli("run", "stream.py:writer", cwd=project)
    wait_for(lambda: graph_node(runtime, "writer", "virtualcamerasink").get("state") == "running", timeout=60,
             what="the writer")
    runtime.popen_cli("run", "stream.py:reader", cwd=project)
    rows = _frames(project, 5, "five frames through the loopback device")
    assert {(r["width"], r["height"]) for r in rows} == {(320, 240)}
    assert all(abs(c - 255) <= 12 for c in rows[-1]["top_left"][:3]), rows[-1]  # the pattern's first bar: white


@pytest.mark.slow
def test_a_project_uses_the_camera_nodes_without_ffmpeg_in_its_venv(project_venv: Path):
    check = subprocess.run(
        [str(project_venv / "bin" / "python"), "-c",
         "import importlib.util as u, sys; from tatolab.stream import CameraSource, VirtualCameraSink; "
         "print(u.find_spec('av') is None, 'av' in sys.modules)"],
        capture_output=True, text=True, check=True)
    assert check.stdout.split() == ["True", "False"]


@pytest.mark.slow
@pytest.mark.skipif(v4l2.cameras() != [], reason="this machine has a camera, which the example opens")
def test_the_tutorials_motion_watcher_falls_back_to_the_test_pattern_and_says_so(runtime, video_venv, tmp_path):
    import shutil

    from harness import REPO

    project = tmp_path / "motion-watcher"
    shutil.copytree(REPO / "examples" / "motion-watcher", project, ignore=shutil.ignore_patterns(".venv", ".streamlib"))
    (project / ".venv").symlink_to(video_venv, target_is_directory=True)
    runtime.popen_cli("run", cwd=project)

    def detector_read() -> int:
        node = graph_node(runtime, "motion_watcher", "detector")
        return sum(port["read"] for port in node.get("inputs", []))

    wait_for(lambda: detector_read() > 3, timeout=90, what="frames read by the detector")
    assert graph_node(runtime, "motion_watcher", "camera")["kind"] == "tatolab._builtins.camera:CameraSource"
    said = [r["message"] for r in _log(project) if r.get("node") == "camera"]
    assert 'this machine has no camera: showing the test pattern instead (fallback="test_pattern")' in said, said
