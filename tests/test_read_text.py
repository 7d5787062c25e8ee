"""examples/read-text: a real OCR model (rapidocr-onnxruntime) on video, in a stream.

A video made here with known words goes through the example as READ_TEXT_SOURCE: the words are
read, their boxes lie on the words' ink, the model loads once per process before the first bag,
and a `tatolab dev` save of the drawing node leaves the OCR node's process alone."""

from __future__ import annotations

import importlib.util
import shutil
import signal
import sys
from pathlib import Path

import pytest

from harness import REPO, graph_node, read_jsonl, wait_for

EXAMPLE = REPO / "examples" / "read-text"
WORDS = ["QUARTZ", "PIXEL", "ORBIT"]
MARGIN = 16  # pixels a box may reach past the word's ink (the detector's box is a little larger)


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_video():
    return _module("read_text_make_video", EXAMPLE / "make_video.py")


def test_the_models_answer_becomes_texts_with_boxes_around_their_corners():
    ocr = _module("read_text_ocr", EXAMPLE / "nodes" / "ocr.py")
    result = [[[[64.0, 154.5], [438.0, 150.0], [438.0, 189.0], [64.0, 189.0]], "HELLO", 0.9972],
              [[[1, 1], [5, 1], [5, 5], [1, 5]], "faint", 0.3]]
    assert ocr.read_texts(result, 0.5) == [{"text": "HELLO", "box": [64, 150, 438, 189], "score": 0.997}]
    assert ocr.read_texts(None, 0.5) == []


def _project(tmp_path: Path, venv: Path) -> Path:
    project = tmp_path / "read-text"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", ".streamlib", "texts.jsonl"))
    (project / ".venv").symlink_to(venv, target_is_directory=True)
    return project


def _log(project: Path, stream: str = "read_text") -> list[dict]:
    return read_jsonl(project / ".streamlib" / "logs" / f"{stream}.jsonl")


def _read_every_word(project: Path) -> dict[str, list[int]]:
    """The box each of WORDS was last read in (texts.jsonl), once all were read."""
    boxes = {}
    for row in read_jsonl(project / "texts.jsonl"):
        for text in row["texts"]:
            if text["text"] in WORDS:
                boxes[text["text"]] = text["box"]
    return boxes if len(boxes) == len(WORDS) else {}


@pytest.mark.slow
def test_a_video_with_known_words_is_read_with_boxes_on_the_words(runtime, model_venv, tmp_path):
    project = _project(tmp_path, model_venv)
    video = make_video()
    video.write_text_video(str(tmp_path / "words.mp4"), scenes=[WORDS], seconds_per_scene=4.0)
    env = {**runtime.env, "READ_TEXT_SOURCE": str(tmp_path / "words.mp4")}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)  # the window waits for a display; the rest runs
    runtime.popen_cli("run", cwd=project, env=env)

    boxes = wait_for(lambda: _read_every_word(project), timeout=150, what=f"{WORDS} in texts.jsonl")
    ink = video.word_boxes(WORDS)
    for word, (x0, y0, x1, y1) in boxes.items():
        ix0, iy0, ix1, iy1 = ink[word]
        assert ix0 - MARGIN <= x0 <= ix0 + MARGIN and ix1 - MARGIN <= x1 <= ix1 + MARGIN, (word, boxes[word], ink[word])
        assert iy0 - MARGIN <= y0 <= iy0 + MARGIN and iy1 - MARGIN <= y1 <= iy1 + MARGIN, (word, boxes[word], ink[word])
    rows = read_jsonl(project / "texts.jsonl")
    assert all(set(row) == {"frame_timestamp_ns", "texts"} and row["frame_timestamp_ns"] > 0 for row in rows)

    # the model loaded once, in setup, before the node's first bag: one process, one "loaded"
    ocr = graph_node(runtime, "read_text", "ocr")
    assert ocr["state"] == "running" and ocr["restarts"] == 0
    loaded = [r for r in _log(project) if r.get("node") == "ocr" and r["message"] == "OCR models loaded"]
    assert len(loaded) == 1, loaded
    overlay = graph_node(runtime, "read_text", "overlay")
    assert overlay["outputs"][0]["written"] > 0  # the drawn frames


@pytest.mark.slow
def test_saving_the_drawing_node_in_dev_leaves_the_ocr_node_and_its_model_loaded(runtime, model_venv, tmp_path):
    from test_warm import node_pids_by_name

    project = _project(tmp_path, model_venv)
    env = {k: v for k, v in runtime.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    dev = runtime.popen_cli("dev", cwd=project, env=env)
    try:
        wait_for(lambda: read_jsonl(project / "texts.jsonl"), timeout=150, what="the first texts read")
        before = node_pids_by_name(runtime, "read_text")
        draw = project / "nodes" / "draw.py"
        draw.write_text(draw.read_text().replace("BOX = (255, 64, 32, 255)", "BOX = (32, 200, 64, 255)"))
        said = wait_for(lambda: [r["message"] for r in _log(project) if r["message"].startswith("reloaded ")],
                        timeout=60, what="the reload after saving nodes/draw.py")
        assert said[0].startswith("reloaded overlay (it imports nodes/draw.py); kept "), said
        assert "ocr" in said[0].split("; kept ", 1)[1]
        after = wait_for(lambda: (lambda pids: pids if pids.get("overlay") not in (None, before["overlay"]) else None)(
            node_pids_by_name(runtime, "read_text")), timeout=60, what="the new overlay")
        assert after["ocr"] == before["ocr"]
        loaded = [r for r in _log(project) if r.get("node") == "ocr" and r["message"] == "OCR models loaded"]
        assert len(loaded) == 1, loaded
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)


@pytest.mark.slow
def test_an_agent_sees_the_camera_reads_the_texts_and_finds_the_ocr_node_slowest_over_mcp(runtime, model_venv, tmp_path):
    """`tatolab mcp` with the official client, on the example as it ships (text.mp4, on a loop)."""
    import asyncio

    pytest.importorskip("mcp")
    from test_mcp_live import session_with

    video = make_video()
    shipped = {word for scene in video.SCENES for word in scene}
    project = _project(tmp_path, model_venv)
    env = {k: v for k, v in runtime.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    runtime.popen_cli("run", cwd=project, env=env)
    wait_for(lambda: read_jsonl(project / "texts.jsonl"), timeout=150, what="the first texts read")

    async def asking() -> None:
        async with asyncio.timeout(240), session_with(runtime, tmp_path) as s:
            # what does the camera show: a PNG of its newest frame
            shown = await s.session.call_tool("exchange", {"address": "read_text/camera/video", "timeout": 30})
            assert not shown.is_error, shown.content
            images = [block for block in shown.content if block.type == "image"]
            assert len(images) == 1 and images[0].mime_type == "image/png", shown.content

            # what text was read lately: the bags on ocr/texts
            error, text, tap = await s.call("tap", address="read_text/ocr/texts", count=5, timeout=30)
            assert not error, text
            read = {t["text"] for b in tap["bags"] for t in b["bag"]["texts"]}
            assert read and read <= shipped, read
            assert all(set(b["bag"]) == {"frame_timestamp_ns", "texts"} for b in tap["bags"])

            # what is slow: the OCR node, by its process() time, on the path to the texts' file
            def through_ocr(paths: list[dict]) -> dict | None:
                return next((p for p in paths if p["to"] == "jsonl/rows" and p["slowest_node"]
                             and p["slowest_node"]["node"] == "ocr"), None)

            for _ in range(60):
                error, text, slow = await s.call("slowest_paths", limit=10)
                assert not error, text
                path = through_ocr(slow["paths"])
                if path is not None:
                    break
                await asyncio.sleep(0.5)  # the next look at the paths' histograms: they fill as bags arrive
            assert path is not None, slow
            assert path["slowest_node"]["process_p50_us"] >= 1000 and path["through"] == ["ocr"], path

    asyncio.run(asking())
