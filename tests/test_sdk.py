"""The public SDK without processes: naming, @node, StreamBuilder, the bag codec."""


import dataclasses
import datetime
from typing import TypedDict

import pydantic
import pytest

from tatolab import _bags
from tatolab._errors import AddressError, BagError, ConfigError, GraphError, NodeDefinitionError
from tatolab._naming import Address, format_address, parse_address, url_safe
from tatolab._sdk.nodes import config_value, create, describe_node
from tatolab.stream import Exposure, StreamBuilder, node, stream


# --- naming ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("Caméra Avant", "camera-avant"),
        ("MotionDetector", "motiondetector"),
        ("motion_watcher", "motion_watcher"),
        ("a.b-c_d~e", "a.b-c_d~e"),
        ("front door!", "front-door-"),
        ("Ünïcödé", "unicode"),
        ("x/y?z", "x-y-z"),
        ("ﬁle", "file"),  # compatibility forms decompose too
        ("日本", "--"),
    ],
)
def test_url_safe_lowercases_drops_accents_and_replaces_the_rest(name, safe):
    assert url_safe(name) == safe
    assert url_safe(safe) == safe


@pytest.mark.parametrize("name", ["", ".", "..", "\u0301"])
def test_url_safe_refuses_names_with_nothing_left(name):
    with pytest.raises(AddressError, match="URL-safe"):
        url_safe(name)


def test_addresses_parse_with_and_without_machine():
    assert parse_address("motion_watcher/detector/motion") == Address(None, "motion_watcher", "detector", "motion")
    full = parse_address("Rover/Caméra/detector/motion")
    assert full == Address("rover", "camera", "detector", "motion")
    assert format_address(full) == "rover/camera/detector/motion"
    for bad in ["a/b", "a//c", "a/b/c/d/e", ""]:
        with pytest.raises(AddressError, match="<stream>/<node>/<port>"):
            parse_address(bad)


# --- @node ------------------------------------------------------------------------------------


@dataclasses.dataclass
class AlarmConfig:
    threshold_celsius: float = 60.0


@node
class TemperatureAlarm:
    """Sends an alarm for each reading above the threshold."""

    @node.input(delivery_profile="ordered")
    def readings(self) -> dict: ...

    @node.output()
    def alarms(self) -> dict: ...

    def __init__(self, config: AlarmConfig) -> None:
        self.threshold_celsius = config.threshold_celsius

    def process(self, ctx) -> None: ...


@node(execution="continuous", interval_ms=100)
class Ticker:
    @node.output()
    def ticks(self) -> dict: ...

    def process(self, ctx) -> None: ...


def test_describe_node_gives_the_graph_entry():
    assert describe_node(TemperatureAlarm) == {
        "class": f"{__name__}:TemperatureAlarm",
        "doc": "Sends an alarm for each reading above the threshold.",
        "execution": "reactive",
        "interval_ms": None,
        "inputs": [{"port": "readings", "delivery_profile": "ordered"}],
        "outputs": [{"port": "alarms"}],
    }
    ticker = describe_node(Ticker)
    assert ticker["execution"] == "continuous" and ticker["interval_ms"] == 100 and ticker["doc"] is None


def test_node_is_created_with_its_config_or_defaults():
    assert create(TemperatureAlarm, {"threshold_celsius": 12}, node="alarm").threshold_celsius == 12.0
    assert create(TemperatureAlarm, None, node="alarm").threshold_celsius == 60.0
    assert isinstance(create(Ticker, None, node="t"), Ticker)


def test_input_without_delivery_profile_is_refused_naming_class_port_and_choices():
    with pytest.raises(NodeDefinitionError) as info:

        @node
        class Detector:
            @node.input()
            def frames(self) -> dict: ...

            def process(self, ctx): ...

    message = str(info.value)
    assert "Detector" in message and "'frames'" in message
    assert 'delivery_profile="newest"' in message and 'delivery_profile="ordered"' in message


def test_bare_input_marker_and_unknown_profile_are_refused():
    with pytest.raises(NodeDefinitionError, match="no delivery profile"):

        @node
        class A:
            @node.input
            def frames(self) -> dict: ...

            def process(self, ctx): ...

    with pytest.raises(NodeDefinitionError, match="'latest'.*\"newest\".*\"ordered\""):

        @node
        class B:
            @node.input(delivery_profile="latest")
            def frames(self) -> dict: ...

            def process(self, ctx): ...


def test_node_without_inputs_must_choose_continuous_or_manual():
    with pytest.raises(NodeDefinitionError, match='execution="continuous".*execution="manual"'):

        @node
        class Source:
            @node.output()
            def frames(self) -> dict: ...

            def process(self, ctx): ...


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"execution": "sometimes"}, "not one Tatolab knows"),
        ({"execution": "continuous"}, "needs interval_ms"),
        ({"execution": "continuous", "interval_ms": 0}, "needs interval_ms"),
        ({"execution": "manual", "interval_ms": 5}, "only to execution=\"continuous\""),
    ],
)
def test_execution_choices_are_checked(kwargs, match):
    with pytest.raises(NodeDefinitionError, match=match):

        @node(**kwargs)
        class Source:
            @node.output()
            def frames(self) -> dict: ...

            def process(self, ctx): ...


def test_manual_node_needs_no_process_but_others_do():
    @node(execution="manual")
    class Manual:
        @node.output()
        def frames(self) -> dict: ...

        def setup(self, ctx): ...

    assert describe_node(Manual)["execution"] == "manual"
    with pytest.raises(NodeDefinitionError, match="no process"):

        @node
        class NoProcess:
            @node.input(delivery_profile="newest")
            def frames(self) -> dict: ...


def test_init_with_parameters_tatolab_cannot_fill_is_refused():
    with pytest.raises(NodeDefinitionError, match="Rename 'cfg' to config"):

        @node(execution="manual")
        class Bad:
            @node.output()
            def out(self) -> dict: ...

            def __init__(self, cfg: AlarmConfig) -> None: ...


def test_add_a_class_that_is_not_a_node():
    class Plain:
        pass

    with pytest.raises(NodeDefinitionError, match="Plain is not a node. Decorate the class with @node"):
        StreamBuilder("s").add(Plain)


# --- config -------------------------------------------------------------------------------------


class SizeDict(TypedDict):
    width: int
    height: int


class Thresholds(pydantic.BaseModel):
    low: float
    high: float = 1.0


def _node_with_config(config_type):
    @node
    class Configured:
        @node.input(delivery_profile="newest")
        def frames(self) -> dict: ...

        def __init__(self, config: config_type) -> None:  # type: ignore[valid-type]
            self.config = config

        def process(self, ctx): ...

    return Configured


def test_config_is_checked_against_a_dataclass():
    builder = StreamBuilder("cams")
    builder.add(TemperatureAlarm, config={"threshold_celsius": 40})
    with pytest.raises(ConfigError) as info:
        builder.add(TemperatureAlarm, config={"threshold_celsius": "hot"}, name="other")
    message = str(info.value)
    assert "Node 'other' (TemperatureAlarm)" in message
    assert "field `threshold_celsius`" in message and "`float`" in message and "`str`" in message
    with pytest.raises(ConfigError, match="'treshold' is not in AlarmConfig. Its fields: threshold_celsius"):
        builder.add(TemperatureAlarm, config={"treshold": 3}, name="third")


def test_config_accepts_a_config_object():
    builder = StreamBuilder("cams")
    builder.add(TemperatureAlarm, config=AlarmConfig(threshold_celsius=5))
    assert builder._graph()["nodes"][0]["config"] == {"threshold_celsius": 5}


def test_config_is_checked_against_a_typeddict():
    sized = _node_with_config(SizeDict)
    assert create(sized, {"width": 4, "height": 3}, node="n").config == {"width": 4, "height": 3}
    with pytest.raises(ConfigError, match="missing required field `height`"):
        StreamBuilder("s").add(sized, config={"width": 4})


def test_config_is_checked_against_a_pydantic_model():
    model = _node_with_config(Thresholds)
    value = config_value(model, {"low": 0.2}, node="n")
    assert isinstance(value, Thresholds) and value.high == 1.0
    with pytest.raises(ConfigError, match=r"field `low`: .*valid number.*'x'"):
        StreamBuilder("s").add(model, config={"low": "x"})


def test_config_for_a_node_without_config_and_non_json_values():
    with pytest.raises(ConfigError, match="takes no config"):
        StreamBuilder("s").add(Ticker, config={"rate": 3})
    with pytest.raises(ConfigError, match=r"config\['when'\] is a datetime"):
        StreamBuilder("s").add(_node_with_config(dict), config={"when": datetime.datetime.now()})
    with pytest.raises(ConfigError, match="field `low`: Field required"):
        StreamBuilder("s").add(_node_with_config(Thresholds))


def test_optional_config_may_be_omitted():
    optional = _node_with_config(AlarmConfig | None)
    assert create(optional, None, node="n").config is None


# --- StreamBuilder --------------------------------------------------------------------------------


def test_unknown_port_lists_the_nodes_ports():
    builder = StreamBuilder("alarms")
    alarm = builder.add(TemperatureAlarm)
    with pytest.raises(GraphError) as info:
        alarm.output("alarm")
    assert str(info.value) == (
        "Node 'temperaturealarm' (TemperatureAlarm) in stream 'alarms' has no output named 'alarm'. "
        "Its outputs: alarms. Its inputs: readings."
    )
    with pytest.raises(GraphError, match="'readings' is an input, not an output"):
        alarm.output("readings")


def test_duplicate_node_names_suggest_name():
    builder = StreamBuilder("s")
    builder.add(Ticker)
    with pytest.raises(GraphError, match='already has a node named \'ticker\'.*name="ticker-2"'):
        builder.add(Ticker)
    assert builder.add(Ticker, name="Ticker Two").name == "ticker-two"


def test_connect_checks_direction_and_records_links_and_exposures():
    builder = StreamBuilder("s")
    ticks = builder.add(Ticker)
    alarm = builder.add(TemperatureAlarm, name="alarm")
    with pytest.raises(GraphError, match="output first, then the input"):
        builder.connect(alarm.input("readings"), ticks.output("ticks"))
    builder.connect(ticks.output("ticks"), alarm.input("readings"))
    builder.connect(builder.remote_output("machine/other/node/port"), alarm.input("readings"))
    with pytest.raises(GraphError, match="already connected"):
        builder.connect(ticks.output("ticks"), alarm.input("readings"))
    builder.expose(alarm.output("alarms"))
    builder.expose(ticks.output("ticks"), Exposure.PUBLIC)
    with pytest.raises(GraphError, match="is not an address"):
        builder.remote_output("just-a-name")
    graph = builder._graph()
    assert graph["links"] == [
        {"from": {"node": "ticker", "port": "ticks"}, "to": {"node": "alarm", "port": "readings"}},
        {"from": {"address": "machine/other/node/port"}, "to": {"node": "alarm", "port": "readings"}},
    ]
    assert graph["exposures"] == [
        {"node": "alarm", "port": "alarms", "level": "private"},
        {"node": "ticker", "port": "ticks", "level": "public"},
    ]


def test_stream_decorator_keeps_the_function():
    @stream
    def bars(stream_builder: StreamBuilder) -> None:
        stream_builder.add(Ticker)

    builder = StreamBuilder("bars")
    bars(builder)
    assert [n["name"] for n in builder._graph()["nodes"]] == ["ticker"]


# --- bags -----------------------------------------------------------------------------------------


def test_bag_roundtrip_with_bytes_and_nesting():
    bag = {
        "sensor": "a",
        "celsius": 21.5,
        "n": 3,
        "ok": True,
        "none": None,
        "raw": b"\x00\x01",
        "buf": bytearray(b"ab"),
        "view": memoryview(b"cd"),
        "list": [1, (2, 3), {"x": "y"}],
        "meta": {"deep": {"deeper": [b"z"]}},
    }
    out = _bags.decode(_bags.encode(bag, node="n", port="p"))
    assert out["raw"] == b"\x00\x01" and out["buf"] == b"ab" and out["view"] == b"cd"
    assert out["list"] == [1, [2, 3], {"x": "y"}]
    assert out["meta"] == {"deep": {"deeper": [b"z"]}}


def test_bag_refuses_a_datetime_naming_the_key_path():
    with pytest.raises(BagError) as info:
        _bags.encode({"meta": {"when": datetime.datetime.now()}}, node="detector", port="motion")
    message = str(info.value)
    assert "Node 'detector' cannot write to output 'motion'" in message
    assert 'bag["meta"]["when"] is a datetime.datetime' in message
    assert "isoformat()" in message


@pytest.mark.parametrize(
    ("bag", "match"),
    [
        ([1, 2], "a bag must be a dict, not list"),
        ({1: "a"}, "bag has the key 1 of type int"),
        ({"tags": {"a", "b"}}, r'bag\["tags"\] is a set'),
        ({"list": [1, object()]}, r'bag\["list"\]\[1\] is an object'),
    ],
)
def test_bag_refusals(bag, match):
    with pytest.raises(BagError, match=match):
        _bags.encode(bag, node="n", port="p")


def test_bag_accepts_subclasses_of_allowed_types():
    class Name(str):
        pass

    assert _bags.decode(_bags.encode({Name("k"): Name("v")}, node="n", port="p")) == {"k": "v"}


def _values(depth: int):
    import hypothesis.strategies as st

    class Str(str):
        pass

    scalars = st.one_of(
        st.text(max_size=3), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
        st.binary(max_size=3), st.builds(bytearray, st.binary(max_size=3)), st.builds(memoryview, st.binary(max_size=3)),
        st.builds(datetime.date, st.integers(1, 9999), st.just(1), st.just(1)), st.builds(Str, st.text(max_size=2)),
        st.sets(st.integers(), max_size=2),
    )
    keys = st.one_of(st.text(max_size=3), st.integers(), st.builds(Str, st.text(max_size=2)))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(keys, inner, max_size=3),
        ),
        max_leaves=depth,
    )


def test_the_compiled_bag_check_takes_exactly_the_bags_the_python_one_takes():
    """_native.bag_fits is _bags' fast walk in C: it must say yes and no to the same bags, or a
    bag the Python walk refuses by name would be packed (or a good one sent the slow way)."""
    from hypothesis import given, settings
    import hypothesis.strategies as st

    try:
        from tatolab._links import _native
    except ImportError:
        pytest.fail("tatolab/_links/_native.c was not built: install a C compiler and Python's headers "
                    "(apt install gcc python3-dev), then scripts/setup")

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.dictionaries(st.text(max_size=3), _values(12), max_size=4), _values(6)))
    def agree(bag):
        assert _native.bag_fits(bag) == _bags._fits_bag(bag), bag

    agree()
    deep = leaf = {}
    for _ in range(70):  # the depth limit is the same in both
        leaf["k"] = {}
        leaf = leaf["k"]
        assert _native.bag_fits(deep) == _bags._fits_bag(deep)


@dataclasses.dataclass
class Reading:
    sensor: str
    celsius: float


class ReadingDict(TypedDict):
    sensor: str
    celsius: float


class ReadingModel(pydantic.BaseModel):
    sensor: str
    celsius: float


def test_convert_into_dataclass_typeddict_and_pydantic():
    bag = {"sensor": "a", "celsius": 21, "extra": 1}
    assert _bags.convert(bag, Reading, node="n", port="readings") == Reading("a", 21.0)
    assert _bags.convert(bag, ReadingDict, node="n", port="readings") == {"sensor": "a", "celsius": 21.0}
    assert _bags.convert(bag, ReadingModel, node="n", port="readings") == ReadingModel(sensor="a", celsius=21)


@pytest.mark.parametrize("kind", [Reading, ReadingDict, ReadingModel])
def test_convert_says_what_did_not_fit(kind):
    with pytest.raises(BagError) as info:
        _bags.convert({"sensor": "a", "celsius": "hot"}, kind, node="alarm", port="readings")
    message = str(info.value)
    assert f"Node 'alarm' read a bag on input 'readings' that does not fit {kind.__name__}" in message
    assert "field `celsius`" in message
    assert "ctx.inputs.read('readings')" in message
    with pytest.raises(BagError, match="missing required field `celsius`|field `celsius`: Field required"):
        _bags.convert({"sensor": "a"}, kind, node="alarm", port="readings")


def test_url_safe_refuses_a_name_too_long_to_name_a_file():
    assert url_safe("c" * 100) == "c" * 100
    with pytest.raises(AddressError, match="is 101 characters long; a name has at most 100 characters"):
        url_safe("c" * 101)


def test_the_errors_a_stream_can_meet_are_importable_from_tatolab_stream():
    from tatolab.stream import AddressError, BagError, ConfigError, GraphError, StreamBuilder, TatolabError
    from tatolab.stream import TestPatternSource

    assert all(issubclass(e, TatolabError) for e in (AddressError, BagError, ConfigError, GraphError))
    builder = StreamBuilder("errors")
    with pytest.raises(ConfigError, match="fps must be"):
        builder.add(TestPatternSource, config={"fps": 0})
    pattern = builder.add(TestPatternSource)
    with pytest.raises(GraphError):
        pattern.output("no_such_port")
