"""``--when 'EXPR'``: which trigger bags start a window (``tatolab record --on ADDRESS``).

The expression is Python's syntax for a test of one bag, evaluated here by walking its tree,
never by ``eval``: names are the bag's keys (``bag`` is the whole bag), with constants,
comparisons (``==``, ``<``, ``in``...), ``and``/``or``/``not``, arithmetic, ``[...]`` and
``len``/``abs``/``min``/``max``. ``score > 0.8 and label == "person"``. Anything else is refused
when the recording starts; a bag the expression does not fit (a missing key) is no trigger.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv,
}
_CALLS: dict[str, Callable[..., Any]] = {"len": len, "abs": abs, "min": min, "max": max}


class BadExpression(ValueError):
    """An expression this module does not evaluate; the text says which part and what is allowed."""


class _Missing(Exception):
    pass


def compile_when(text: str) -> Callable[[Any], bool]:
    """``text`` checked now; the test it makes of a bag."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise BadExpression(f"--when {text!r} is not an expression: {exc.msg}") from None
    _check(tree.body, text)

    def test(bag: Any) -> bool:
        try:
            return bool(_eval(tree.body, bag))
        except (_Missing, TypeError, ValueError, ZeroDivisionError, KeyError, IndexError):
            return False

    return test


def _check(node: ast.AST, text: str) -> None:
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Name,
               ast.Load, ast.Constant, ast.Subscript, ast.List, ast.Tuple, ast.Call, *_COMPARE, *_BINARY)
    for sub in ast.walk(node):
        if not isinstance(sub, allowed):
            raise BadExpression(f"--when {text!r}: {type(sub).__name__} is not allowed; use the bag's keys, "
                                "constants, comparisons, and/or/not, arithmetic, [...] and len/abs/min/max")
        if isinstance(sub, ast.Call) and (not isinstance(sub.func, ast.Name) or sub.func.id not in _CALLS
                                          or sub.keywords):
            raise BadExpression(f"--when {text!r}: only len, abs, min and max may be called")


def _eval(node: ast.AST, bag: Any) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id == "bag":
            return bag
        if isinstance(bag, dict) and node.id in bag:
            return bag[node.id]
        raise _Missing(node.id)
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, bag) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, bag)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, bag), _eval(node.right, bag))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, bag)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, bag)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):
        return _eval(node.value, bag)[_eval(node.slice, bag)]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, bag) for e in node.elts]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _CALLS[node.func.id](*(_eval(a, bag) for a in node.args))
    raise _Missing(type(node).__name__)
