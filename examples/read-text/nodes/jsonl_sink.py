import json
from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class JsonlSinkConfig:
    path: str


@node
class JsonlSink:
    """Appends every bag it reads to a JSON Lines file, one line each."""

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
            self.file.write(json.dumps(row) + "\n")

    def teardown(self, ctx: RuntimeContextLimitedAccess) -> None:
        self.file.close()
