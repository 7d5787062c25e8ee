from tatolab.stream import GlslPixelEffect, StreamBuilder, TestPatternSource, stream

from nodes.detector import MotionDetector


@stream
def motion_watcher(stream_builder: StreamBuilder) -> None:
    """Watches a video source (the test pattern; a camera once it exists) and reports motion
    for other streams to read, with a tint on the picture (the tutorial's step 5)."""
    camera = stream_builder.add(TestPatternSource, config={"width": 640, "height": 360, "fps": 30}, name="camera")
    detector = stream_builder.add(MotionDetector, config={"threshold": 0.5}, name="detector")
    tint = stream_builder.add(GlslPixelEffect, config={"path": "shaders/tint.glsl"}, name="tint")
    stream_builder.connect(camera.output("video"), detector.input("frames"))
    stream_builder.connect(camera.output("video"), tint.input("video"))
    stream_builder.expose(detector.output("motion"))
