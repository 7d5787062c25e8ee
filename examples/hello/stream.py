from tatolab.stream import StreamBuilder, stream

from nodes.counter import Counter
from nodes.jsonl_sink import JsonlSink
from nodes.squarer import Squarer


@stream
def hello(stream_builder: StreamBuilder) -> None:
    """Counts, squares each count, and appends the results to squares.jsonl."""
    counter = stream_builder.add(Counter, config={"interval_note": "ten a second"})
    squarer = stream_builder.add(Squarer)
    sink = stream_builder.add(JsonlSink, config={"path": "squares.jsonl"})
    stream_builder.connect(counter.output("counts"), squarer.input("numbers"))
    stream_builder.connect(squarer.output("squares"), sink.input("rows"))
