"""A runtime refusal in the CLI's words: each fix (an operation with arguments) as a command or a flag.

The runtime says what is wrong and which operation fixes it (tatolab/_control/errors.py);
only here does that become `tatolab rm cam` or --name.
"""

from __future__ import annotations

from typing import Any, Callable

from tatolab._control.errors import ControlError, Fix
from tatolab._sdk.naming import as_argument

# The flag that gives an argument of a loading operation (load, dev) on the command line.
FLAGS = {"project": "--dir", "name": "--name", "count": "--count", "file": "--file"}


def command(fix: Fix) -> str:
    """The command or flag that does ``fix``."""
    if fix.op == "load" and fix.args.get("mode") == "kept":
        return f"`tatolab run -d` in {fix.args.get('project')}"
    if fix.op in ("load", "dev"):  # an argument of the command being run: its flag
        return " ".join(FLAGS.get(arg, f"--{arg}") for arg in fix.args)
    words = ["tatolab", fix.op] + [as_argument(str(v)) for v in fix.args.values() if v is not None]
    return "`" + " ".join(words) + "`"


def _fixes_with(joiner: str) -> Callable[[ControlError], str]:
    def render(error: ControlError) -> str:
        return error.message + joiner + ", or ".join(f"{fix.does} with {command(fix)}" for fix in error.fixes)
    return render


def _then_fixes(error: ControlError) -> str:
    return error.message + ". Fix it, then " + ", or ".join(f"{command(f)} {f.does}" for f in error.fixes)


def _see(error: ControlError) -> str:
    return error.message + "; " + ", ".join(f"{fix.does} {command(fix)}" for fix in error.fixes)


def _elsewhere(error: ControlError) -> str:
    d = error.details
    op = d["op"]
    return (f"{d['address']} is on machine {d['machine']}, and `tatolab {op}` works on this machine ({d['here']}); "
            f"run `tatolab {op} {d['local']}` on {d['machine']} (ssh to it)")


def _bad_value(error: ControlError) -> str:
    arg = error.details["argument"]
    return FLAGS.get(arg, f"--{arg}") + error.message.removeprefix(arg)


def _keep_again(error: ControlError) -> str:
    return error.message + " and run `tatolab run -d` again, or run it attached"


def _command_does(error: ControlError) -> str:
    return error.message + "; " + ", ".join(f"{command(fix)} {fix.does}" for fix in error.fixes)


def fixes_in_turn(fixes: tuple[Fix, ...] | list[Fix]) -> str:
    """`tatolab rm x` forgets it; then `tatolab run -d` in P keeps it again"""
    return "; then ".join(f"{command(fix)} {fix.does}" for fix in fixes)


def _damaged(error: ControlError) -> str:
    return error.message + ". " + fixes_in_turn(error.fixes)


RENDER: dict[str, Callable[[ControlError], str]] = {
    "damaged_record": _damaged,
    "no_sdk": _command_does,
    "record_unwritten": _keep_again,
    "not_a_folder": _fixes_with("; "),
    "name_kept": _fixes_with(": "),
    "name_loaded": _fixes_with("; "),
    "failed_again": _then_fixes,
    "changed_meanwhile": _see,
    "on_another_machine": _elsewhere,
    "bad_value": _bad_value,
}


def render(error: ControlError) -> str:
    """What the terminal shows for ``error``."""
    how = RENDER.get(error.code)
    if how is not None:
        return how(error)
    if error.fixes:
        return _fixes_with("; ")(error)
    return error.message


def from_answer(answer: dict[str, Any]) -> str:
    return render(ControlError.from_wire(answer))
