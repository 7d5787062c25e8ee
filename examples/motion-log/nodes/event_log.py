import json
from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class EventLogConfig:
    path: str = "motion-events.jsonl"


@node
class EventLog:
    """Appends each event it reads as one JSON line."""

    @node.input(delivery_profile="ordered")
    def motion(self) -> dict: ...

    def __init__(self, config: EventLogConfig) -> None:
        self.path = config.path

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.file = open(self.path, "a", buffering=1)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        event = ctx.inputs.read("motion")
        if event is not None:
            event["logged_ns"] = ctx.time
            self.file.write(json.dumps(event) + "\n")

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.file.close()
