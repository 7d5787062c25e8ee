"""How an operation describes itself: its docstring, typed arguments and a typed result.

An operation is ``async def name(runtime, **args) -> Result`` registered with ``@op("name")``.
Its arguments are checked against their annotations before it runs; ``schema()`` gives the
JSON Schema of the arguments and of the result, which the ``operations`` request lists (what
an MCP server turns into tools). An operation that keeps talking (an attached run, a tap,
following a log) returns ``Events[A, E]``: an async iterator whose first item (an ``A``) is the
answer and whose later items (``E``s) the server sends as ``{"event": ...}`` lines until the client
hangs up.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol, TypeVar

import msgspec

from tatolab._control.errors import ControlError

A = TypeVar("A", covariant=True)
E = TypeVar("E", covariant=True)


class Events(Protocol[A, E]):
    """The return annotation of an operation that keeps talking: an async iterator (what an
    ``async def`` with ``yield`` makes) whose first item, an ``A``, is the answer, then events of
    type ``E``. ``Events[E, E]``: the answer is the first event. A plain member beside it in a
    union (``Surface | Events[...]``) is what the operation answers without talking."""

    def __aiter__(self) -> AsyncIterator[A | E]: ...

    def __anext__(self) -> Awaitable[A | E]: ...

    def aclose(self) -> Awaitable[None]: ...  # the server closes it when the client hangs up


# Arguments that name a stream or a node: one rule for names everywhere. A stream or node is named
# as the graph names it, URL-safe (`run -d --name CaseTest` keeps `casetest`), so each of these is
# made URL-safe as it arrives: `stop CaseTest`, `logs --stream CaseTest` find `casetest`.
NAMED = ("stream", "name", "node")


def _as_named(text: str) -> str:
    from tatolab._errors import AddressError
    from tatolab._naming import url_safe

    try:
        return url_safe(text)
    except AddressError:
        return text  # nothing URL-safe in it: the operation says it names nothing


@dataclass(frozen=True)
class Operation:
    name: str
    function: Callable[..., Awaitable[Any]]
    doc: str
    arguments: type[msgspec.Struct]  # one field per argument, with its type and default
    result: Any  # the answer's type (for an operation that talks: its first event's, or None)
    events: Any  # the type of the events that follow the answer (None: it does not talk)

    @property
    def talks(self) -> bool:
        return self.events is not None

    def check(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` converted to their declared types, or a ControlError naming what does not fit."""
        try:
            typed = msgspec.convert(args, self.arguments)
        except msgspec.ValidationError as exc:
            raise ControlError(f"bad arguments for {self.name}: {_problem(exc)}", code="bad_arguments") from None
        checked = {name: getattr(typed, name) for name in self.arguments.__struct_fields__}
        for key in NAMED:
            if isinstance(checked.get(key), str):
                checked[key] = _as_named(checked[key])
        return checked

    def schema(self) -> dict[str, Any]:
        # msgspec describes a union of TypedDicts member by member: anyOf is assembled here
        groups = [[self.arguments], _members(self.result), _members(self.events)]
        flat, components = msgspec.json.schema_components(
            [t for group in groups for t in group], ref_template="#/$defs/{name}")
        schemas, at = [], 0
        for group in groups:
            part = list(flat[at:at + len(group)])
            at += len(group)
            schemas.append(part[0] if len(part) == 1 else {"anyOf": part})
        arguments, result, events = schemas
        arguments = components.pop(self.arguments.__name__, arguments)
        arguments.pop("title", None)
        described: dict[str, Any] = {"name": self.name, "description": self.doc, "arguments": arguments,
                                     "talks": self.talks, "result": result}
        if self.talks:
            described["events"] = events
        if components:
            described["$defs"] = components
        return described


def describe(name: str, function: Callable[..., Awaitable[Any]]) -> Operation:
    """Read an operation's docstring and annotations (its first parameter is the runtime)."""
    hints = typing.get_type_hints(function)
    parameters = list(inspect.signature(function).parameters.values())[1:]
    fields: list[tuple[Any, ...]] = []
    for parameter in parameters:
        kind = hints.get(parameter.name, Any)
        if parameter.default is inspect.Parameter.empty:
            fields.append((parameter.name, kind))
        else:
            fields.append((parameter.name, kind, parameter.default))
    arguments = msgspec.defstruct(f"{name}_arguments", fields, kw_only=True, forbid_unknown_fields=True)
    returns = hints.get("return", Any)
    members = typing.get_args(returns) if typing.get_origin(returns) in (typing.Union, types.UnionType) else (returns,)
    talking = [typing.get_args(m) for m in members if typing.get_origin(m) is Events]
    plain = [m for m in members if typing.get_origin(m) is not Events]
    answer, events = talking[0] if talking else (None, None)
    # a talking operation's answer is its first item's type, unless plain members say otherwise
    result = typing.Union[tuple(plain)] if plain else answer
    doc = inspect.cleandoc(function.__doc__ or "")
    if not doc:
        raise TypeError(f"operation {name} has no docstring: every operation says what it does")
    return Operation(name=name, function=function, doc=doc, arguments=arguments, result=result, events=events)


def _members(kind: Any) -> list[Any]:
    if kind is None:
        return [Any]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return list(typing.get_args(kind))
    return [kind]


def _problem(exc: msgspec.ValidationError) -> str:
    # msgspec: "Expected `int`, got `str` - at `$.count`" or "Object contains unknown field `nmae`"
    text, sep, where = str(exc).rpartition(" - at `")
    if not sep:
        return (str(exc).replace("Object contains unknown field", "unknown argument")
                .replace("Object missing required field", "missing argument"))
    return f"{where.rstrip('`').removeprefix('$.')}: {text[0].lower()}{text[1:]}"
