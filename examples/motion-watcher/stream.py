from tatolab.stream import CameraSource, DisplayWindow, GlslPixelEffect, StreamBuilder, stream

from nodes.detector import MotionDetector


@stream
def motion_watcher(stream_builder: StreamBuilder) -> None:
    """Watches the camera (the test pattern where the machine has none, as its log says), shows it
    in a window with a tint (the tutorial's step 5), and reports motion for other streams to read."""
    camera = stream_builder.add(CameraSource, config={"width": 640, "height": 360, "fps": 30,
                                                      "fallback": "test_pattern"}, name="camera")
    detector = stream_builder.add(MotionDetector, config={"threshold": 0.5}, name="detector")
    tint = stream_builder.add(GlslPixelEffect, config={"path": "shaders/tint.glsl"}, name="tint")
    window = stream_builder.add(DisplayWindow, config={"title": "motion watcher"}, name="window")
    stream_builder.connect(camera.output("video"), detector.input("frames"))
    stream_builder.connect(camera.output("video"), tint.input("video"))
    stream_builder.connect(tint.output("video_out"), window.input("video"))
    stream_builder.expose(detector.output("motion"))
