"""A refusal from the runtime: a code, a message for a person, and the fixes as operations.

The runtime never writes CLI syntax: a fix names an operation and its arguments
(``Fix("rm", {"name": "cam"}, "remove it first")``); the CLI renders it as a command or a
flag (tatolab/_control/words.py), an MCP server as a tool call.
"""

from __future__ import annotations

from tatolab._value import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the CLI's start (issue 28)
if TYPE_CHECKING:
    from typing import Any


class Fix(Value):
    """An operation that fixes it (``op``), its arguments (a value of None: the caller chooses
    one) and what doing it does, in words (``does``: "remove it first")."""

    __slots__ = ("op", "args", "does")

    def __init__(self, op: str, args: dict[str, Any] | None = None, does: str = "") -> None:
        self.op = op
        self.args: dict[str, Any] = {} if args is None else args
        self.does = does


class Reason(Value):
    """Why something is as it is (a failed kept stream, a waiting link, an ended stream): plain
    words for any client, which case it is (``code``), the fixes, and the values a client needs
    to word it its own way (``details``). The CLI words it with tatolab/_control/words.py."""

    __slots__ = ("text", "code", "fixes", "details")

    def __init__(self, text: str, code: str = "", fixes: tuple[Fix, ...] = (),
                 details: dict[str, Any] | None = None) -> None:
        self.text = text
        self.code = code
        self.fixes = fixes
        self.details: dict[str, Any] = {} if details is None else details

    def __str__(self) -> str:
        return self.text

    def to_wire(self) -> dict[str, Any]:
        return {"text": self.text, "code": self.code, "details": self.details,
                "fixes": [{"op": f.op, "args": f.args, "does": f.does} for f in self.fixes]}

    @classmethod
    def from_wire(cls, data: Any) -> "Reason":
        """From ``to_wire``'s dict, or from plain text (what records written before held)."""
        if not isinstance(data, dict):
            return cls(str(data))
        fixes = tuple(Fix(f.get("op", ""), f.get("args") or {}, f.get("does", "")) for f in data.get("fixes") or ())
        return cls(str(data.get("text", "")), str(data.get("code") or ""), fixes, dict(data.get("details") or {}))


class ControlError(Exception):
    """A request that cannot be done; the message is for the person who asked.

    ``code`` says which refusal it is (clients render by it), ``fixes`` what would let it
    through, ``details`` the values a client needs to word it its own way.
    """

    def __init__(self, message: str, *, code: str = "refused", fixes: tuple[Fix, ...] | list[Fix] = (),
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fixes = tuple(fixes)
        self.details = details or {}

    @property
    def reason(self) -> Reason:
        return Reason(self.message, self.code, self.fixes, self.details)

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "error": self.message, "details": self.details,
                "fixes": [{"op": f.op, "args": f.args, "does": f.does} for f in self.fixes]}

    @classmethod
    def from_wire(cls, answer: dict[str, Any]) -> "ControlError":
        fixes = [Fix(f.get("op", ""), f.get("args") or {}, f.get("does", "")) for f in answer.get("fixes") or ()]
        return cls(str(answer.get("error", "the runtime refused the request")), code=answer.get("code", "refused"),
                   fixes=fixes, details=answer.get("details") or {})
