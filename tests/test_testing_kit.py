"""The public testing kit (run_node, FakeContext), ctx.log.every, execution="thread", the idle hook
and the origin rule of the per-bag engine (tatolab/_host/ports.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tatolab import _bags
from tatolab.stream import BagError, CannotRun, FakeContext, GraphError, NodeDefinitionError, node, run_node


@node
class Doubler:
    """Doubles each number it reads, and says so."""

    @node.input(delivery_profile="ordered")
    def numbers(self) -> dict: ...

    @node.output()
    def doubled(self) -> dict: ...

    @node.output()
    def calls(self) -> dict: ...

    def __init__(self) -> None:
        self.calls_made = 0

    def setup(self, ctx) -> None:
        ctx.log.info("set up")

    def process(self, ctx) -> None:
        self.calls_made += 1
        ctx.outputs.write("calls", {"call": self.calls_made})
        bag = ctx.inputs.read("numbers")
        if bag is not None:
            ctx.outputs.write("doubled", {"n": bag["n"] * 2})
            ctx.report(last=bag["n"])

    def teardown(self, ctx) -> None:
        ctx.log.info("torn down", calls=self.calls_made)


@node
class Latest:
    @node.input(delivery_profile="newest")
    def frames(self) -> dict: ...

    @node.output()
    def seen(self) -> dict: ...

    def process(self, ctx) -> None:
        while (bag := ctx.inputs.read("frames")) is not None:
            ctx.outputs.write("seen", bag)


@dataclasses.dataclass
class Scale:
    factor: int = 1


@node
class Scaler:
    @node.input(delivery_profile="ordered")
    def numbers(self) -> dict: ...

    @node.output()
    def scaled(self) -> dict: ...

    def __init__(self, config: Scale) -> None:
        self.factor = config.factor

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("numbers")
        ctx.outputs.write("scaled", {"n": bag["n"] * self.factor, "bad": object()} if bag["n"] < 0
                          else {"n": bag["n"] * self.factor})


def test_every_bag_of_an_ordered_input_is_processed_in_order_one_call_each():
    run = run_node(Doubler, inputs={"numbers": [{"n": 1}, {"n": 2}, {"n": 3}]})
    assert run.outputs["doubled"] == [{"n": 2}, {"n": 4}, {"n": 6}]
    assert run.outputs["calls"] == [{"call": 1}, {"call": 2}, {"call": 3}]  # process() per bag, none more
    assert run.reports == [{"last": 1}, {"last": 2}, {"last": 3}] and run.metrics == {"last": 3}
    assert run.messages() == ["set up", "torn down"]
    assert run.logs[-1]["fields"] == {"calls": 3} and run.logs[-1]["node"] == "Doubler"
    assert run.logs[-1]["level"] == "info" and run.logs[-1]["stream"] == "test"


def test_a_newest_input_gives_the_last_bag_only():
    run = run_node(Latest, inputs={"frames": [{"i": 0}, {"i": 1}, {"i": 2}]})
    assert run.outputs == {"seen": [{"i": 2}]}


def test_config_is_checked_and_given_as_add_gives_it():
    assert run_node(Scaler, {"factor": 3}, {"numbers": [{"n": 2}]}).outputs["scaled"] == [{"n": 6}]
    assert run_node(Scaler, Scale(factor=5), {"numbers": [{"n": 2}]}).outputs["scaled"] == [{"n": 10}]
    with pytest.raises(Exception, match="the config field 'factr' is not in"):
        run_node(Scaler, {"factr": 3})


def test_a_wrong_port_name_gives_the_runtimes_error_naming_node_and_ports():
    with pytest.raises(GraphError) as given:
        run_node(Doubler, inputs={"numbrs": [{"n": 1}]}, node="double")
    ctx = FakeContext(Doubler, node="double")
    with pytest.raises(GraphError) as read:
        ctx.inputs.read("numbrs")
    assert str(given.value) == str(read.value) == "node double has no input port 'numbrs'; its inputs are: numbers"


def test_a_bag_that_cannot_be_encoded_gives_the_runtimes_error():
    with pytest.raises(BagError) as given:
        run_node(Doubler, inputs={"numbers": [{"n": {1, 2}}]}, node="double")
    with pytest.raises(BagError) as encoded:
        _bags.encode({"n": {1, 2}}, "double", "numbers")
    assert str(given.value) == str(encoded.value) and "Node 'double'" in str(given.value)
    with pytest.raises(BagError) as written:  # what the node writes: the very error ctx.outputs.write raises
        run_node(Scaler, inputs={"numbers": [{"n": -1}]}, node="scale")
    with pytest.raises(BagError) as direct:
        _bags.encode({"n": -1, "bad": object()}, "scale", "scaled")
    assert str(written.value) == str(direct.value) and "scaled" in str(written.value)


def test_a_fake_context_serves_direct_calls():
    ctx = FakeContext(Doubler, inputs={"numbers": [{"n": 4}]}, node="double")
    instance = Doubler()
    instance.process(ctx)
    instance.process(ctx)  # nothing left: read gives None
    ctx.feed("numbers", {"n": 5})
    instance.process(ctx)
    assert ctx.run.outputs["doubled"] == [{"n": 8}, {"n": 10}]
    assert ctx.inputs.link("numbers") == "test->double/numbers"
    assert ctx.node == "double" and not ctx.stopping.is_set()


def test_log_every_logs_the_first_and_every_nth_with_the_count():
    ctx = FakeContext(Latest)
    counts = [ctx.log.every(3, "warning", f"frame {i} dropped", where="pool") for i in range(7)]
    for _ in range(2):
        ctx.log.every(3, "error", "another line counts apart")
    assert counts == [1, 2, 3, 4, 5, 6, 7]
    assert [(r["level"], r["message"], r["fields"]) for r in ctx.run.logs] == [
        ("warning", "frame 0 dropped", {"where": "pool", "count": 1}),
        ("warning", "frame 2 dropped", {"where": "pool", "count": 3}),
        ("warning", "frame 5 dropped", {"where": "pool", "count": 6}),
        ("error", "another line counts apart", {"count": 1}),
    ]
    with pytest.raises(TypeError, match="one of debug, info, warning, error"):
        ctx.log.every(3, "loud", "x")
    with pytest.raises(TypeError, match="a whole number above 0"):
        ctx.log.every(0, "info", "x")


@node(execution="thread")
class Ticker:
    """Writes a tick until it is stopped; ``fail_at`` raises at that tick."""

    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self, config: dict) -> None:
        self.fail_at = config.get("fail_at")
        self.returned = False

    def run(self, ctx) -> None:
        n = 0
        while not ctx.stopping.is_set():
            if n == self.fail_at:
                raise ValueError(f"tick {n} broke")
            ctx.outputs.write("ticks", {"n": n})
            n += 1
            ctx.stopping.wait(0.001)
        self.returned = True

    def teardown(self, ctx) -> None:
        ctx.log.info("teardown", returned=self.returned)


def test_a_thread_source_runs_until_it_is_stopped_then_tears_down():
    run = run_node(Ticker, {}, until=lambda run: len(run.outputs["ticks"]) >= 5)
    ticks = [bag["n"] for bag in run.outputs["ticks"]]
    assert ticks[:5] == [0, 1, 2, 3, 4] and ticks == list(range(len(ticks)))
    assert run.logs[-1]["message"] == "teardown" and run.logs[-1]["fields"] == {"returned": True}


def test_what_a_thread_source_raises_is_raised_once_after_teardown():
    with pytest.raises(ValueError, match="tick 3 broke"):
        run_node(Ticker, {"fail_at": 3})


def test_a_thread_node_needs_run_and_takes_no_watchdog():
    with pytest.raises(NodeDefinitionError, match=r'execution="thread" and no run\(self, ctx\) method'):
        @node(execution="thread")
        class NoRun:
            @node.output()
            def out(self) -> dict: ...
    with pytest.raises(NodeDefinitionError, match='execution="thread" drives itself'):
        @node(execution="thread", watchdog_ms=100)
        class Watched:
            @node.output()
            def out(self) -> dict: ...

            def run(self, ctx) -> None: ...


def test_a_source_without_inputs_is_told_of_thread_execution():
    with pytest.raises(NodeDefinitionError, match=r'@node\(execution="thread"\) to have run\(self, ctx\) called'):
        @node
        class Source:
            @node.output()
            def out(self) -> dict: ...

            def process(self, ctx) -> None: ...


def test_idle_ms_must_be_a_positive_number():
    with pytest.raises(NodeDefinitionError, match="idle_ms is how often"):
        @node
        class Window:
            idle_ms = 0

            @node.input(delivery_profile="newest")
            def frames(self) -> dict: ...

            def process(self, ctx) -> None: ...

            def idle(self, ctx) -> None: ...


def test_cannot_run_from_a_thread_source_is_raised_as_such():
    @node(execution="thread")
    class Refuser:
        @node.output()
        def out(self) -> dict: ...

        def run(self, ctx) -> None:
            raise CannotRun("no such device")

    with pytest.raises(CannotRun, match="no such device"):
        run_node(Refuser)


class _Reader:
    def __init__(self, bags):
        self.bags = list(bags)

    def read_many(self):
        run, self.bags = self.bags, []
        return run

    def read(self):
        return self.bags.pop() if self.bags else None

    def discard(self, n=1):
        pass

    def count_bad(self):
        pass


@pytest.mark.parametrize("profile", ["ordered", "newest"])
def test_a_bag_with_no_origin_leaves_the_oldest_origin_read_on_every_path(profile):
    from tatolab._host.ports import InputPort, inherit_origin

    payload = _bags.encode({"n": 1}, "n", "p")
    port = InputPort("in", profile)
    port.origin = cell = [0, 0]
    # two links (fan-in): first a bag with an origin, then one with none (0) published later
    port.add_link("a", _Reader([(payload, 1, 500, 7)]))
    port.add_link("b", _Reader([(payload, 2, 0, 0)]))
    port.fill()
    while port.take() is not None:
        port.fill()
    # ordered: both bags handed over, the older origin kept; newest: only b's (no origin) handed over
    assert cell == ([500, 7] if profile == "ordered" else [0, 0])
    one = InputPort("in", "ordered")
    one.origin = cell = [0, 0]
    one.add_link("a", _Reader([(payload, 1, 500, 7), (payload, 2, 0, 0), (payload, 3, 900, 8)]))
    while one.fill():
        one.take()
    assert cell == [500, 7]
    inherit_origin(cell, (payload, 4, 100, 9))
    assert cell == [100, 9]


def _readme_python(heading: str) -> str:
    """The python blocks of README's section ``heading``, as one module."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    return "\n".join(block.split("\n```", 1)[0] for block in section.split("```python\n")[1:])


def test_the_readmes_testing_example_runs_as_written():
    code = _readme_python("### Testing a node")
    assert "run_node(Doubler" in code
    scope: dict = {"__name__": "readme_testing"}
    exec(compile(code, "README.md", "exec"), scope)
    tests = [name for name in scope if name.startswith("test_")]
    assert len(tests) == 2
    for name in tests:
        scope[name]()


def test_the_readmes_thread_source_runs_until_stopped():
    scope: dict = {"__name__": "readme_writing"}
    exec(compile(_readme_python("## Writing a node"), "README.md", "exec"), scope)
    run = run_node(scope["Ticker"], until=lambda run: len(run.outputs["ticks"]) >= 2)
    assert [bag["n"] for bag in run.outputs["ticks"]][:2] == [0, 1]


def test_fan_in_links_deliver_in_the_order_fed_and_name_their_link():
    @node
    class Sink:
        @node.input(delivery_profile="ordered")
        def tracks(self) -> dict: ...

        @node.output()
        def seen(self) -> dict: ...

        def process(self, ctx) -> None:
            while (bag := ctx.inputs.read("tracks")) is not None:
                ctx.outputs.write("seen", {"n": bag["n"], "link": ctx.inputs.link("tracks")})

    a, b = "a/packets->sink/tracks", "b/packets->sink/tracks"
    ctx = FakeContext(Sink, node="sink", links={"tracks": [a]})
    ctx.add_link("tracks", b)
    assert ctx.inputs.links("tracks") == [a, b]
    for n, link in ((1, a), (2, b), (3, a)):
        ctx.feed("tracks", {"n": n}, link=link)
    instance = Sink()
    while ctx.fill():
        instance.process(ctx)
    assert ctx.run.outputs["seen"] == [{"n": 1, "link": a}, {"n": 2, "link": b}, {"n": 3, "link": a}]
    with pytest.raises(GraphError, match="input 'tracks' has no link 'c'"):
        ctx.feed("tracks", {"n": 4}, link="c")


def test_an_ordered_fan_in_node_reading_one_bag_a_call_is_called_for_every_bag():
    """Two links deliver at once; a node reading one bag a call gets a call for the other too,
    not only when a new bag comes (at the end, none ever would)."""
    @node
    class One:
        @node.input(delivery_profile="ordered")
        def tracks(self) -> dict: ...

        @node.output()
        def seen(self) -> dict: ...

        def process(self, ctx) -> None:
            bag = ctx.inputs.read("tracks")
            if bag is not None:
                ctx.outputs.write("seen", {"n": bag["n"]})

    a, b = "a/packets->one/tracks", "b/packets->one/tracks"
    ctx = FakeContext(One, node="one", links={"tracks": [a, b]})
    for n, link in ((1, a), (2, b), (3, a), (4, b)):
        ctx.feed("tracks", {"n": n}, link=link)
    instance = One()
    calls = 0
    while ctx.fill():
        instance.process(ctx)
        calls += 1
    assert ctx.run.outputs["seen"] == [{"n": n} for n in (1, 2, 3, 4)]
    assert calls == 4


@pytest.mark.parametrize("cell, origin", [
    ([0, 0], (500, 7)), ([0, 0], (0, 0)), ([400, 3], (500, 7)), ([600, 3], (500, 7)), ([600, 3], (0, 0)),
    ([600, 3], None),
])
def test_take_inherits_origins_by_the_one_rule(cell, origin):
    """InputPort.take writes inherit_origin's rule out (the per-bag path): the two give the same cell."""
    from tatolab._host.ports import InputPort, inherit_origin

    payload = _bags.encode({"n": 1}, "n", "p")
    bag = (payload, 1) if origin is None else (payload, 1, *origin)
    port = InputPort("in", "ordered")
    port.origin = taken = list(cell)
    port.add_link("a", _Reader([bag]))
    port.fill()
    port.take()
    expected = list(cell)
    inherit_origin(expected, bag)
    assert taken == expected
