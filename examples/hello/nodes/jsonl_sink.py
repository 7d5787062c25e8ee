import json
from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class JsonlSinkConfig:
    path: str


@node
class JsonlSink:
    """Appends every bag it reads to a JSON Lines file."""

    @node.input(delivery_profile="ordered")
    def rows(self) -> dict: ...

    def __init__(self, config: JsonlSinkConfig) -> None:
        self.path = config.path

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.file = open(self.path, "a", buffering=1)
        ctx.log.info("writing rows", path=self.path)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        row = ctx.inputs.read("rows")
        if row is not None:
            row["latency_us"] = (ctx.time - row["sent_ns"]) // 1000
            self.file.write(json.dumps(row) + "\n")
            if row["n"] % 10 == 0:
                ctx.log.info("row written", n=row["n"], square=row["square"], latency_us=row["latency_us"])

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.file.close()
