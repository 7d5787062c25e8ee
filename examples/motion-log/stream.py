from tatolab.stream import StreamBuilder, stream

from nodes.event_log import EventLog


@stream
def motion_log(stream_builder: StreamBuilder) -> None:
    """Appends every motion event motion_watcher reports to motion-events.jsonl."""
    event_log = stream_builder.add(EventLog, config={"path": "motion-events.jsonl"})
    stream_builder.connect(
        stream_builder.remote_output("motion_watcher/detector/motion"),
        event_log.input("motion"),
    )
