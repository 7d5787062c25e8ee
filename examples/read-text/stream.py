import os

from tatolab.stream import CameraSource, DisplayWindow, StreamBuilder, stream

from nodes.draw import TextOverlay
from nodes.jsonl_sink import JsonlSink
from nodes.ocr import TextReader

# What the camera reads: READ_TEXT_SOURCE, an FFmpeg input (a file, a URL, /dev/video0 as
# v4l2 through a device path), else text.mp4 beside this file, made by make_video.py, on a loop
SOURCE = os.environ.get("READ_TEXT_SOURCE") or "text.mp4"


@stream
def read_text(stream_builder: StreamBuilder) -> None:
    """Reads the text in a video (the camera, or a file): the words and their boxes go out on
    ocr/texts and into texts.jsonl; the video with the boxes drawn goes to a window and the viewer."""
    if SOURCE.startswith("/dev/video"):
        camera_config = {"device": SOURCE}
    else:
        camera_config = {"source": SOURCE, "loop": not os.environ.get("READ_TEXT_SOURCE")}
    camera = stream_builder.add(CameraSource, config=camera_config, name="camera")
    ocr = stream_builder.add(TextReader, name="ocr")
    overlay = stream_builder.add(TextOverlay, name="overlay")
    sink = stream_builder.add(JsonlSink, config={"path": "texts.jsonl"}, name="jsonl")
    window = stream_builder.add(DisplayWindow, config={"title": "read text"}, name="window")
    stream_builder.connect(camera.output("video"), ocr.input("frames"))
    stream_builder.connect(camera.output("video"), overlay.input("frames"))
    stream_builder.connect(ocr.output("texts"), overlay.input("texts"))
    stream_builder.connect(ocr.output("texts"), sink.input("rows"))
    stream_builder.connect(overlay.output("video"), window.input("video"))
    stream_builder.expose(camera.output("video"))
    stream_builder.expose(overlay.output("video"))
    stream_builder.expose(ocr.output("texts"))
