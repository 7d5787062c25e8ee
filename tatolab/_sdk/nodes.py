"""``@node``, its ``@node.input`` / ``@node.output`` port markers, and ``describe_node``."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable, TypeVar

import msgspec

from tatolab import _bags
from tatolab._classpath import class_path
from tatolab._errors import ConfigError, NodeDefinitionError
from tatolab._sdk.audio import AudioShape
from tatolab._naming import url_safe

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Any])

DELIVERY_PROFILES = ("newest", "ordered")
EXECUTIONS = ("reactive", "continuous", "thread", "manual")

_PORT_ATTR = "__tatolab_port__"
NODE_ATTR = "__tatolab_node__"
_NO_PROFILE = object()
_MAX_SPIN_US = 1_000_000  # an input's spin window: at most a second of polling before it sleeps


@dataclasses.dataclass(frozen=True)
class _PortMark:
    kind: str  # "input" | "output"
    delivery_profile: Any = _NO_PROFILE
    audio: Any = None  # inputs only: what @node.input(audio={...}) asked for, checked by @node
    spin_us: Any = None  # inputs only: what @node.input(spin_us=...) asked for, checked by @node


@dataclasses.dataclass(frozen=True)
class PortSpec:
    name: str  # URL-safe; the method's name unless that has capitals or accents
    attribute: str  # the method's name
    delivery_profile: str | None = None  # inputs only
    audio: AudioShape | None = None  # inputs only: the audio blocks this input receives
    spin_us: int | float | None = None  # inputs only: how long its reader polls before sleeping


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    class_path: str  # "module:Qualname", what the node host imports
    class_name: str
    doc: str | None
    execution: str
    interval_ms: int | float | None
    inputs: tuple[PortSpec, ...]
    outputs: tuple[PortSpec, ...]
    takes_config: bool
    config_type: Any  # dict for "any dict", else a dataclass / TypedDict / pydantic model / msgspec Struct
    config_optional: bool  # annotated ``T | None``: an omitted config arrives as None
    watchdog_ms: int | float | None = None  # None: the runtime's default; 0: no watchdog
    memory_limit_mb: int | float | None = None  # None: no limit


class _NodeDecorator:
    """``@node`` marks a class as a node; ``@node.input(...)`` / ``@node.output()`` mark its ports."""

    def __call__(
        self,
        cls: C | None = None,
        /,
        *,
        execution: str | None = None,
        interval_ms: int | float | None = None,
        watchdog_ms: int | float | None = None,
        memory_limit_mb: int | float | None = None,
    ) -> Any:
        limits = {"watchdog_ms": watchdog_ms, "memory_limit_mb": memory_limit_mb}
        if cls is None:
            return lambda target: _define(target, execution, interval_ms, **limits)
        return _define(cls, execution, interval_ms, **limits)

    def input(
        self, delivery_profile: Any = _NO_PROFILE, *, audio: dict[str, Any] | None = None,
        spin_us: int | float | None = None,
    ) -> Any:
        """Mark a method as an input port: ``@node.input(delivery_profile="newest" | "ordered")``.

        ``audio={"sample_rate": 16000, "channels": 1, "format": "f32", "window_ms": 20}`` (with
        ``"ordered"``): whatever audio the producer sends, the node reads blocks of exactly that
        shape, resampled, remixed, converted and cut by the runtime.

        ``spin_us=50``: for an input that must be fast, the node polls its links for up to that
        many microseconds before it sleeps, so a bag that comes within the window is taken
        without a wake (a few microseconds instead of tens), at the CPU the polling costs.
        """
        if callable(delivery_profile):  # bare @node.input: no profile chosen; @node reports it
            return _mark(delivery_profile, _PortMark("input"))
        return lambda method: _mark(method, _PortMark("input", delivery_profile, audio, spin_us))

    def output(self, method: F | None = None) -> Any:
        """Mark a method as an output port: ``@node.output()``."""
        if method is not None:
            return _mark(method, _PortMark("output"))
        return lambda target: _mark(target, _PortMark("output"))


node = _NodeDecorator()


def _mark(method: F, mark: _PortMark) -> F:
    if not callable(method):
        raise NodeDefinitionError(
            f"@node.{mark.kind}() marks a method, like `def frames(self) -> dict: ...`, not {method!r}."
        )
    setattr(method, _PORT_ATTR, mark)
    return method


def is_node(obj: Any) -> bool:
    return isinstance(obj, type) and isinstance(obj.__dict__.get(NODE_ATTR), NodeSpec)


def node_spec(cls: Any) -> NodeSpec:
    """The spec ``@node`` stored on ``cls``; a clear error for anything else."""
    if is_node(cls):
        spec: NodeSpec = cls.__dict__[NODE_ATTR]
        return spec
    name = getattr(cls, "__qualname__", None) or repr(cls)
    if isinstance(cls, type):
        raise NodeDefinitionError(
            f"{name} is not a node. Decorate the class with @node (from tatolab.stream import node) "
            "and mark its ports with @node.input(...) and @node.output()."
        )
    raise NodeDefinitionError(f"add() takes a node class, like add(MotionDetector), not {name}.")


BUILTIN_ATTR = "__tatolab_builtin__"  # set by tatolab._sdk.builtins.builtin on a built-in's description


def implementation_of(cls: type) -> str | None:
    """The ``module:Class`` a built-in node's description names (None for any other node)."""
    value = cls.__dict__.get(BUILTIN_ATTR)
    return value if isinstance(value, str) else None


def describe_node(cls: type) -> dict[str, Any]:
    """The node's entry in the compiled graph, without ``name`` and ``config`` (the builder adds those)."""
    spec = node_spec(cls)
    implementation = implementation_of(cls)
    described = {
        "class": implementation or spec.class_path,
        "doc": spec.doc,
        "execution": spec.execution,
        "interval_ms": spec.interval_ms,
        "inputs": [_describe_input(p) for p in spec.inputs],
        "outputs": [{"port": p.name} for p in spec.outputs],
    }
    if implementation is not None:
        described["builtin"] = True  # run by the runtime's own interpreter
    # Present only when the node sets them: the runtime applies its defaults otherwise.
    if spec.watchdog_ms is not None:
        described["watchdog_ms"] = spec.watchdog_ms
    if spec.memory_limit_mb is not None:
        described["memory_limit_mb"] = spec.memory_limit_mb
    return described


def _describe_input(port: PortSpec) -> dict[str, Any]:
    described: dict[str, Any] = {"port": port.name, "delivery_profile": port.delivery_profile}
    if port.audio is not None:  # present only when asked for
        described["audio"] = port.audio.as_dict()
    if port.spin_us is not None:  # present only when asked for
        described["spin_us"] = port.spin_us
    return described


def _check_limit(name: str, option: str, value: Any, *, zero_ok: bool, example: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not zero_ok):
        allowed = "a number of milliseconds above 0, or 0 for no watchdog" if zero_ok else "a number of megabytes above 0"
        raise NodeDefinitionError(f"Node {name}: {option} must be {allowed}, e.g. @node({example}); got {option}={value!r}.")


def _define(
    cls: Any,
    execution: str | None,
    interval_ms: int | float | None,
    *,
    watchdog_ms: int | float | None = None,
    memory_limit_mb: int | float | None = None,
) -> Any:
    if not isinstance(cls, type):
        raise NodeDefinitionError(
            f"@node decorates a class, not {cls!r}. "
            "Write @node above `class MyNode:`, or @node(execution=...) to choose how it runs."
        )
    name = cls.__qualname__
    inputs, outputs = _collect_ports(cls)

    chosen = execution is not None
    execution = execution if chosen else "reactive"
    if execution not in EXECUTIONS:
        raise NodeDefinitionError(
            f"Node {name}: execution={execution!r} is not one Tatolab knows. "
            'Choose "reactive" (run when a bag arrives), "continuous" (run every interval_ms), '
            '"thread" (run(ctx) on a thread of its own, until ctx.stopping) or "manual" (the node drives itself).'
        )
    if execution == "reactive" and not inputs:
        raise NodeDefinitionError(
            f"Node {name} {'is reactive but ' if chosen else ''}has no inputs, so nothing would ever make it run. "
            'For a source, use @node(execution="continuous", interval_ms=100) to call process() on a timer, '
            '@node(execution="thread") to have run(self, ctx) called once on a thread of its own (loop until '
            'ctx.stopping is set), or @node(execution="manual") to drive it yourself from a callback started in setup().'
        )
    if execution == "continuous":
        if (
            isinstance(interval_ms, bool)
            or not isinstance(interval_ms, (int, float))
            or not interval_ms > 0
        ):
            raise NodeDefinitionError(
                f"Node {name} runs continuously and needs interval_ms, the time between two calls of "
                f'process(), above 0: @node(execution="continuous", interval_ms=100). Got interval_ms={interval_ms!r}.'
            )
    elif interval_ms is not None:
        raise NodeDefinitionError(
            f'Node {name}: interval_ms applies only to execution="continuous"; '
            f"remove it, or add execution=\"continuous\"."
        )
    if execution == "thread" and not callable(getattr(cls, "run", None)):
        raise NodeDefinitionError(
            f'Node {name} has execution="thread" and no run(self, ctx) method. Add one; Tatolab calls it once, '
            "on a thread of its own, after setup(): write from it until ctx.stopping is set "
            "(`while not ctx.stopping.is_set(): ...`), then return."
        )
    if execution in ("reactive", "continuous") and not callable(getattr(cls, "process", None)):
        raise NodeDefinitionError(
            f"Node {name} has no process(self, ctx) method. Add one; Tatolab calls it "
            + ("when a bag arrives." if execution == "reactive" else f"every {interval_ms} ms.")
        )
    for hook in ("process", "setup", "teardown"):
        value = getattr(cls, hook, None)
        if value is not None and not callable(value):
            raise NodeDefinitionError(f"Node {name}: {hook} must be a method taking (self, ctx).")

    _check_limit(name, "watchdog_ms", watchdog_ms, zero_ok=True, example="watchdog_ms=5000")
    _check_limit(name, "memory_limit_mb", memory_limit_mb, zero_ok=False, example="memory_limit_mb=512")
    if watchdog_ms and execution in ("manual", "thread"):
        raise NodeDefinitionError(
            f'Node {name}: watchdog_ms applies to nodes whose process() Tatolab calls; a node with execution="{execution}" '
            "drives itself. Remove watchdog_ms, or choose reactive or continuous execution."
        )
    idle_ms = getattr(cls, "idle_ms", None)
    if idle_ms is not None and (isinstance(idle_ms, bool) or not isinstance(idle_ms, (int, float)) or not idle_ms > 0):
        raise NodeDefinitionError(
            f"Node {name}: idle_ms is how often, at most, idle(self, ctx) is called while no bag comes, "
            f"in milliseconds above 0 (e.g. idle_ms = 50); got {idle_ms!r}."
        )
    takes_config, config_type, optional = _config_signature(cls)
    doc = cls.__dict__.get("__doc__")
    spec = NodeSpec(
        class_path=class_path(cls),
        class_name=cls.__name__,
        doc=inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None,
        execution=execution,
        interval_ms=interval_ms if execution == "continuous" else None,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        takes_config=takes_config,
        config_type=config_type,
        config_optional=optional,
        watchdog_ms=watchdog_ms,
        memory_limit_mb=memory_limit_mb,
    )
    setattr(cls, NODE_ATTR, spec)
    return cls


def _collect_ports(cls: type) -> tuple[list[PortSpec], list[PortSpec]]:
    marks: dict[str, _PortMark] = {}
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            mark = getattr(value, _PORT_ATTR, None)
            if isinstance(mark, _PortMark):
                marks[attribute] = mark
            elif attribute in marks:  # a subclass replaced the port with something else
                del marks[attribute]

    inputs: list[PortSpec] = []
    outputs: list[PortSpec] = []
    seen: dict[tuple[str, str], str] = {}
    for attribute, mark in marks.items():
        port = url_safe(attribute)
        if (mark.kind, port) in seen:
            raise NodeDefinitionError(
                f"Node {cls.__qualname__}: the {mark.kind}s {seen[mark.kind, port]!r} and {attribute!r} "
                f"both become the port name {port!r}; rename one."
            )
        seen[mark.kind, port] = attribute
        if mark.kind == "output":
            outputs.append(PortSpec(port, attribute))
            continue
        profile = mark.delivery_profile
        if profile is _NO_PROFILE or profile is None:
            raise NodeDefinitionError(
                f"Node {cls.__qualname__}: input {attribute!r} has no delivery profile. Every input chooses "
                f'how it reads: @node.input(delivery_profile="newest") for the most recent bag only, or '
                f'@node.input(delivery_profile="ordered") for every bag in order.'
            )
        if profile not in DELIVERY_PROFILES:
            raise NodeDefinitionError(
                f"Node {cls.__qualname__}: input {attribute!r} has delivery_profile={profile!r}; "
                'choose "newest" (the most recent bag) or "ordered" (every bag, in order).'
            )
        audio = None
        if mark.audio is not None:
            where = f"Node {cls.__qualname__}: input {attribute!r}"
            try:
                audio = AudioShape.parse(mark.audio, where)
            except ValueError as exc:
                raise NodeDefinitionError(f"{exc}.") from None
            if profile != "ordered":
                raise NodeDefinitionError(
                    f'{where} asks for audio, which is cut into windows from every block in order: '
                    f'use @node.input(delivery_profile="ordered", audio={{...}}).'
                )
        spin_us = mark.spin_us
        if spin_us is not None and (
            isinstance(spin_us, bool) or not isinstance(spin_us, (int, float)) or not 0 <= spin_us <= _MAX_SPIN_US
        ):
            raise NodeDefinitionError(
                f"Node {cls.__qualname__}: input {attribute!r} has spin_us={spin_us!r}; give the microseconds "
                f"its reader polls before sleeping, a number from 0 to {_MAX_SPIN_US:,} (e.g. spin_us=50), "
                "or leave it out to sleep at once."
            )
        inputs.append(PortSpec(port, attribute, profile, audio, spin_us or None))
    return inputs, outputs


def _config_signature(cls: type) -> tuple[bool, Any, bool]:
    """(takes_config, config_type, optional) from ``__init__(self, config: T)``."""
    init = cls.__init__  # type: ignore[misc]  # (the class's own, as the node host calls it)
    if init is object.__init__:
        return False, None, False
    name = cls.__qualname__
    try:
        parameters = list(inspect.signature(init).parameters.values())[1:]
    except (TypeError, ValueError):
        return False, None, False
    config = None
    for parameter in parameters:
        if parameter.name == "config" and parameter.kind is not parameter.VAR_KEYWORD:
            config = parameter
        elif parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        elif parameter.default is parameter.empty:
            raise NodeDefinitionError(
                f"Node {name}: __init__ takes the parameter {parameter.name!r}, which Tatolab cannot fill. "
                "A node's __init__ takes (self) or (self, config: SomeDataclass), fed from "
                f"add({name}, config={{...}})."
                + (f" Rename {parameter.name!r} to config." if len(parameters) == 1 else "")
            )
    if config is None:
        return False, None, False
    annotation = config.annotation
    if annotation is inspect.Parameter.empty:
        return True, dict, False
    if isinstance(annotation, str):
        try:
            annotation = typing.get_type_hints(init).get("config", annotation)
        except Exception as exc:  # a name only imported under TYPE_CHECKING, a typo
            raise NodeDefinitionError(
                f"Node {name}: cannot resolve the config annotation {config.annotation!r} of __init__ ({exc}). "
                "Import the config type at the top of the node's module."
            ) from None
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        if len(members) == 1:
            annotation = members[0]
    origin = typing.get_origin(annotation) or annotation
    if annotation is Any or origin in (dict, Mapping) or annotation is dict:
        return True, dict, optional
    if not _is_config_type(annotation):
        raise NodeDefinitionError(
            f"Node {name}: the config type {annotation!r} is not one Tatolab can fill. "
            "Annotate config with a dataclass, a TypedDict, a pydantic model, or dict."
        )
    return True, annotation, optional


def _is_config_type(kind: Any) -> bool:
    return (
        (isinstance(kind, type) and dataclasses.is_dataclass(kind))
        or _bags.is_pydantic_model(kind)
        or (isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__total__"))
        or (isinstance(kind, type) and issubclass(kind, msgspec.Struct))
    )


def plain_config(cls: type, config: Any, *, node: str) -> dict[str, Any] | None:
    """Check ``config`` (a dict, a config object or None) against the node's config type.

    Returns the plain dict the graph records (None when none was given); raises ``ConfigError``.
    """
    spec = node_spec(cls)
    label = f"Node '{node}' ({spec.class_name})"
    if config is not None and not isinstance(config, dict):
        config = _to_plain(config, label)
    if not spec.takes_config:
        if config:
            raise ConfigError(
                f"{label} takes no config, but add() was given {config!r}. Remove config=, or give "
                f"{spec.class_name}.__init__ a config parameter: def __init__(self, config: SomeDataclass)."
            )
        return None
    _check_json(config, label)
    config_value(cls, config, node=node)
    plain: dict[str, Any] | None = config
    return plain


def config_value(cls: type, config: dict[str, Any] | None, *, node: str) -> Any:
    """What ``__init__``'s config parameter receives, built from the plain config in the graph."""
    spec = node_spec(cls)
    if not spec.takes_config:
        return None
    if config is None and spec.config_optional:
        return None
    config = {} if config is None else config
    kind = spec.config_type
    label = f"Node '{node}' ({spec.class_name})"
    expected = _bags.field_names(kind)
    if expected is not None:
        unknown = [key for key in config if key not in expected]
        if unknown:
            raise ConfigError(
                f"{label}: the config field {unknown[0]!r} is not in {_bags.type_label(kind)}. "
                f"Its fields: {', '.join(sorted(expected)) or '(none)'}."
            )
    try:
        return _bags.convert_value(config, kind)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{label}: the config does not fit {_bags.type_label(kind)}: {exc}. "
            f"Fix the value given to add({spec.class_name}, config={{...}})."
        ) from None


def create(cls: type, config: dict[str, Any] | None, *, node: str) -> Any:
    """Instantiate a node class the way the node host does: ``cls(config=...)`` or ``cls()``."""
    spec = node_spec(cls)
    if spec.takes_config:
        return cls(config=config_value(cls, config, node=node))
    return cls()


def _to_plain(config: Any, label: str) -> dict[str, Any]:
    plain: dict[str, Any]
    if hasattr(config, "model_dump"):
        plain = config.model_dump(mode="json")
    elif dataclasses.is_dataclass(config) or isinstance(config, msgspec.Struct):
        plain = msgspec.to_builtins(config)
    else:
        raise ConfigError(
            f"{label}: config must be a dict (or a dataclass or pydantic model instance), "
            f"not {type(config).__name__}: {config!r}."
        )
    return plain


def _check_json(value: Any, label: str, path: str = "config") -> None:
    # The graph is JSON, so a config must be JSON: no bytes, datetimes or sets.
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{label}: {path} has the key {key!r}; config keys must be strings.")
            _check_json(item, label, f"{path}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_json(item, label, f"{path}[{index}]")
        return
    raise ConfigError(
        f"{label}: {path} is a {type(value).__name__}; a config holds numbers, strings, booleans, None, "
        "lists and dicts. Convert it first, e.g. str(value)."
    )
