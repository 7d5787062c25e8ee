"""The bag codec: a bag is a dict of numbers, strings, booleans, None, bytes, lists and nested dicts.

Bags travel as msgpack (msgspec). ``encode`` refuses anything else by name, before msgspec would
quietly turn a datetime or a set into something the reader does not expect.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

import msgspec

from tatolab._errors import BagError

T = TypeVar("T")

_SCALARS = frozenset({str, int, float, bool, type(None), bytes, bytearray, memoryview})
_MAX_DEPTH = 64
_encode = msgspec.msgpack.Encoder().encode
_decoder = msgspec.msgpack.Decoder(dict)


def _as_base_type(value: Any) -> Any:
    bases: tuple[type, ...] = (bool, int, float, str, bytes)
    for base in bases:
        if isinstance(value, base):
            return base(value)
    raise TypeError(f"cannot put a {type(value).__name__} in a bag")


_lenient_encoder = msgspec.msgpack.Encoder(enc_hook=_as_base_type)

ALLOWED = "numbers, strings, booleans, None, bytes, lists and nested dicts with string keys"


def encode(bag: dict[str, Any], node: str, port: str) -> bytes:
    """Check ``bag`` holds only what a bag may hold, and pack it as msgpack."""
    if _bag_fits(bag):
        return _encode(bag)
    # Slow path: say what is wrong, or accept subclasses (a str subclass key, numpy.float64)
    # that msgspec packs as their base type.
    problem = _explain(bag, node, port)
    if problem:
        raise BagError(problem)
    return _lenient_encoder.encode(bag)


def decode(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Unpack a bag written by ``encode``."""
    return _decoder.decode(data)


decode_bytes = _decoder.decode  # the same, without a Python frame: the node host's per-bag read
pack = _encode  # encode's packing once the bag fits (fits below), without its frame: ctx.outputs.write's per-bag path


# The fast walk: exact types only, no messages; ``_explain`` walks again to say what is wrong.
# It runs in C where tatolab/_links/_native.c was built (a tenth of the instructions), here
# where it was not (no compiler at install, Python 3.10). Both take exactly the same bags.
# (Measured: a plain loop beats set(map(type, ...)) for bags of a few keys.)
def _fits_bag(bag: Any) -> bool:
    return type(bag) is dict and _fits_dict(bag, 0)


def _fits_dict(value: dict, depth: int) -> bool:
    for key, item in value.items():
        if type(item) in _SCALARS and type(key) is str:
            continue
        if type(key) is not str:
            return False
        kind = type(item)
        if kind is dict:
            if depth >= _MAX_DEPTH or not _fits_dict(item, depth + 1):
                return False
        elif kind is list or kind is tuple:
            if depth >= _MAX_DEPTH or not _fits_seq(item, depth + 1):
                return False
        else:
            return False
    return True


def _fits_seq(value: list | tuple, depth: int) -> bool:
    for item in value:
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is dict:
            if depth >= _MAX_DEPTH or not _fits_dict(item, depth + 1):
                return False
        elif kind is list or kind is tuple:
            if depth >= _MAX_DEPTH or not _fits_seq(item, depth + 1):
                return False
        else:
            return False
    return True


def _explain(bag: Any, node: str, port: str) -> str:
    where = f"Node '{node}' cannot write to output '{port}'"
    if not isinstance(bag, dict):
        return (
            f"{where}: a bag must be a dict, not {_type_name(bag)}. "
            f"Wrap the value in a dict, e.g. ctx.outputs.write({port!r}, {{\"value\": ...}})."
        )
    problem = _find_problem(bag, "bag", 0)
    if problem is None:
        return ""
    path, what, fix = problem
    return f"{where}: {path} {what}. A bag can hold {ALLOWED}. {fix}"


def _find_problem(value: Any, path: str, depth: int) -> tuple[str, str, str] | None:
    if depth > _MAX_DEPTH:
        return path, f"is nested more than {_MAX_DEPTH} levels deep", "Flatten it, or check it does not contain itself."
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (
                    path,
                    f"has the key {key!r} of type {_type_name(key)}",
                    f"Use string keys, e.g. {str(key)!r}.",
                )
            found = _find_problem(item, f"{path}[{json.dumps(key, ensure_ascii=False)}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _find_problem(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, (str, int, float, bytes, bytearray, memoryview)) or value is None:
        return None
    name = _type_name(value)
    return path, f"is {'an' if name[0] in 'aeiou' else 'a'} {name}", _fix_for(value)


def _fix_for(value: Any) -> str:
    name = type(value).__name__
    if name in ("datetime", "date", "time"):
        return "Convert it first, e.g. value.isoformat(), or use a number such as ctx.time (nanoseconds)."
    if name == "timedelta":
        return "Convert it first, e.g. value.total_seconds()."
    if name == "ndarray":
        return "Convert it first: array.tolist() for a few numbers, array.tobytes() for many."
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return "Convert it first with value.item()."
    if isinstance(value, (set, frozenset)):
        return "Convert it first, e.g. sorted(value) or list(value)."
    if dataclasses.is_dataclass(value):
        return "Convert it first, e.g. dataclasses.asdict(value)."
    if hasattr(value, "model_dump"):
        return "Convert it first, e.g. value.model_dump(mode=\"json\")."
    return "Convert it first, e.g. str(value)."


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ in ("builtins", None):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def convert(bag: dict[str, Any], into: type[T], *, node: str, port: str) -> T:
    """Build ``into`` (a dataclass, TypedDict or pydantic model) from ``bag``; ``BagError`` if it does not fit."""
    try:
        return convert_value(bag, into)
    except ValueError as exc:
        problem = (f"Node '{node}' read a bag on input '{port}' that does not fit {type_label(into)}: {exc}. "
                   f"Read it as a dict with ctx.inputs.read({port!r}) to see what arrives, "
                   f"or change {type_label(into)} to match.")
    except TypeError as exc:
        problem = (f"Node '{node}' cannot read input '{port}' into {type_label(into)}: {exc}. "
                   "Pass a dataclass, a TypedDict or a pydantic model as into=.")
    raise BagError(problem)


def is_pydantic_model(kind: Any) -> bool:
    return isinstance(kind, type) and hasattr(kind, "model_validate") and hasattr(kind, "model_fields")


def type_label(kind: Any) -> str:
    return getattr(kind, "__qualname__", None) or repr(kind)


def convert_value(value: Any, into: Any) -> Any:
    """Convert plain data into ``into``. ``ValueError`` says what did not fit; ``TypeError`` means unsupported."""
    if into is dict or into is Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected a dict, got {_type_name(value)}")
        return value
    if is_pydantic_model(into):
        import pydantic

        try:
            return into.model_validate(value)
        except pydantic.ValidationError as exc:
            raise ValueError(_pydantic_problems(exc)) from None
    try:
        return msgspec.convert(value, into)
    except msgspec.ValidationError as exc:
        raise ValueError(_msgspec_problem(str(exc))) from None


def _msgspec_problem(message: str) -> str:
    # msgspec says "Expected `float`, got `str` - at `$.a.b[0]`"; name the field the user wrote.
    text, sep, where = message.rpartition(" - at `")
    if not sep:
        return message[0].lower() + message[1:]
    field = where.rstrip("`").removeprefix("$").lstrip(".")
    detail = text[0].lower() + text[1:]
    return f"field `{field}`: {detail}" if field else detail


def _pydantic_problems(exc: Any) -> str:
    parts = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error.get("loc", ()))
        detail = error.get("msg", "invalid")
        if "input" in error and error.get("type") != "missing":
            detail += f", got {error['input']!r}"
        parts.append(f"field `{field}`: {detail}" if field else detail)
    return "; ".join(parts)


def field_names(kind: Any) -> set[str] | None:
    """The fields a dataclass, TypedDict or pydantic model accepts; None when it takes any key."""
    if dataclasses.is_dataclass(kind):
        return {f.name for f in dataclasses.fields(kind) if f.init}
    if is_pydantic_model(kind):
        if (getattr(kind, "model_config", {}) or {}).get("extra") == "allow":
            return None
        names = set()
        for name, info in kind.model_fields.items():
            names.add(name)
            if info.alias:
                names.add(info.alias)
            if isinstance(info.validation_alias, str):
                names.add(info.validation_alias)
        return names
    if isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__total__"):
        return set(getattr(kind, "__annotations__", {}))
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return set(kind.__struct_fields__)
    return None


try:
    from tatolab._links._native import bag_fits as _bag_fits
except ImportError:
    _bag_fits = _fits_bag
fits = _bag_fits  # True: encode(bag) is pack(bag); False: encode says what is wrong, or packs leniently
