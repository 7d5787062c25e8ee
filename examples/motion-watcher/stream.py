from tatolab.stream import CameraSource, GlslPixelEffect, StreamBuilder, stream

from nodes.detector import MotionDetector


@stream
def motion_watcher(stream_builder: StreamBuilder) -> None:
    """Watches the camera (the test pattern where the machine has none, as its log says) and
    reports motion for other streams to read, with a tint on the picture (the tutorial's step 5)."""
    camera = stream_builder.add(CameraSource, config={"width": 640, "height": 360, "fps": 30,
                                                      "fallback": "test_pattern"}, name="camera")
    detector = stream_builder.add(MotionDetector, config={"threshold": 0.5}, name="detector")
    tint = stream_builder.add(GlslPixelEffect, config={"path": "shaders/tint.glsl"}, name="tint")
    stream_builder.connect(camera.output("video"), detector.input("frames"))
    stream_builder.connect(camera.output("video"), tint.input("video"))
    stream_builder.expose(detector.output("motion"))
