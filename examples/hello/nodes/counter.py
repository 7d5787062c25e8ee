from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class CounterConfig:
    interval_note: str = ""


@node(execution="continuous", interval_ms=100)
class Counter:
    """Sends 0, 1, 2, ... ten times a second."""

    @node.output()
    def counts(self) -> dict: ...

    def __init__(self, config: CounterConfig) -> None:
        self.next = 0

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.outputs.write("counts", {"n": self.next, "sent_ns": ctx.time})
        self.next += 1
