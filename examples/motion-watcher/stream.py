from tatolab.stream import StreamBuilder, stream

from nodes.detector import MotionDetector
from nodes.simulated_camera import SimulatedCamera


@stream
def motion_watcher(stream_builder: StreamBuilder) -> None:
    """Watches a (simulated) camera and reports motion for other streams to read."""
    camera = stream_builder.add(SimulatedCamera, name="camera")
    detector = stream_builder.add(MotionDetector, config={"threshold": 12.0}, name="detector")
    stream_builder.connect(camera.output("frames"), detector.input("frames"))
    stream_builder.expose(detector.output("motion"))
