"""A runtime refusal or reason in command-line words: each fix (an operation with arguments) as a
command or a flag.

The runtime says what is wrong and which operation fixes it (tatolab/_control/errors.py);
only here does that become `tatolab rm cam` or --name. The CLI words every answer with it, and
the runtime its own terminal log (one renderer, so the two never drift apart); an MCP server
reads the operations themselves.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any, Callable

from tatolab._control.errors import ControlError, Fix, Reason


def as_argument(text: str) -> str:
    """naming.as_argument, imported when a fix is worded (unicodedata: not on every command's path)."""
    from tatolab._naming import as_argument as quoted

    return quoted(text)


# The flag that gives an argument of a loading operation (load, dev) on the command line.
FLAGS = {"project": "--dir", "name": "--name", "count": "--count", "file": "--file"}

KEEP = Fix("load", {"mode": "kept"})


def _link(verb: str) -> Callable[[dict[str, Any]], str]:
    def words(args: dict[str, Any]) -> str:
        return f"tatolab link {verb} {as_argument(str(args['output']))} {args['stream']}/{args['input']}"
    return words


# The live-change operations, as the `tatolab node` and `tatolab link` commands write them.
CHANGE_VERBS: dict[str, Callable[[dict[str, Any]], str]] = {
    "add_node": lambda a: " ".join(["tatolab node add", a["stream"], a["name"]]
                                   + ([str(a["node_class"])] if a.get("node_class") else ["<class>"])),
    "remove_node": lambda a: f"tatolab node rm {a['stream']} {a['name']}",
    "connect": _link("add"),
    "disconnect": _link("rm"),
}  # `run -d` itself, named in words such as "kept at `run -d`"


def command(fix: Fix) -> str:
    """The command or flag that does ``fix``."""
    if fix.op == "load" and fix.args == {"mode": "kept"}:  # the command itself, not a fix of it
        return "`run -d`"
    if fix.op == "load" and fix.args.get("mode") == "kept":
        return f"`tatolab run -d` in {fix.args.get('project')}"
    if fix.op in ("load", "dev"):  # an argument of the command being run: its flag
        return " ".join(FLAGS.get(arg, f"--{arg}") for arg in fix.args)
    if fix.op in CHANGE_VERBS:
        return "`" + CHANGE_VERBS[fix.op](fix.args) + "`"
    if fix.op == "expose":  # its level is a flag
        level = fix.args.get("level")
        flag = {"public": " --public", "internal": " --remove"}.get(str(level), "")
        return f"`tatolab expose {as_argument(str(fix.args['address']))}{flag}`"
    if fix.op == "url":  # its switches are flags
        flags = "".join(f" --{name}" for name in ("public", "prefix") if fix.args.get(name))
        return f"`tatolab url {as_argument(str(fix.args['address']))}{flags}`"
    if fix.op.startswith("token_"):  # token_list -> tatolab token list
        return "`" + " ".join(["tatolab token", fix.op[6:]] + [as_argument(str(v)) for v in fix.args.values()]) + "`"
    if fix.op == "logs":  # its arguments are options
        return "`" + " ".join(["tatolab logs"] + [f"--{k} {as_argument(str(v))}" for k, v in fix.args.items()]) + "`"
    words = ["tatolab", fix.op] + [as_argument(str(v)) for v in fix.args.values() if v is not None]
    return "`" + " ".join(words) + "`"


def _fixes_with(joiner: str) -> Callable[[Reason], str]:
    def render(error: Reason) -> str:
        return error.text + joiner + ", or ".join(f"{fix.does} with {command(fix)}" for fix in error.fixes)
    return render


def _then_fixes(error: Reason) -> str:
    d = error.details
    text = f"{d['name']} failed again: {render(Reason.from_wire(d['why']))}" if "why" in d else error.text
    return text + ". Fix it, then " + ", or ".join(f"{command(f)} {f.does}" for f in error.fixes)


def _see(error: Reason) -> str:
    return error.text + "; " + ", ".join(f"{fix.does} {command(fix)}" for fix in error.fixes)


def _elsewhere(error: Reason) -> str:
    d = error.details
    op = d["op"]
    return (f"{d['address']} is on machine {d['machine']}, and `tatolab {op}` works on this machine ({d['here']}); "
            f"run `tatolab {op} {d['local']}` on {d['machine']} (ssh to it)")


def _bad_value(error: Reason) -> str:
    arg = error.details["argument"]
    return FLAGS.get(arg, f"--{arg}") + error.text.removeprefix(arg)


def _keep_again(error: Reason) -> str:
    return error.text + " and run `tatolab run -d` again, or run it attached"


def _command_does(error: Reason) -> str:
    return error.text + "; " + ", ".join(f"{command(fix)} {fix.does}" for fix in error.fixes)


def fixes_in_turn(fixes: tuple[Fix, ...] | list[Fix]) -> str:
    """`tatolab rm x` forgets it; then `tatolab run -d` in P keeps it again"""
    return "; then ".join(f"{command(fix)} {fix.does}" for fix in fixes)


def _damaged(error: Reason) -> str:
    return error.text + ". " + fixes_in_turn(error.fixes)


def named(op: str, args: dict[str, Any]) -> str:
    """The command of an operation, named in a sentence ("stopped by `tatolab stop`")."""
    return "`tatolab run -d`" if op == "load" and args.get("mode") == "kept" else f"`tatolab {op}`"


def _ended_by(reason: Reason) -> str:
    """stopped by `tatolab stop`, replaced by a new `tatolab run -d`"""
    d = reason.details
    return f"{d['ended']} by {'a new ' if d.get('new') else ''}{named(d['op'], d.get('args') or {})}"


def _meanwhile(reason: Reason) -> str:
    d = reason.details
    return f"{d['name']} was stopped meanwhile ({render(Reason.from_wire(d['why']))})"


def _not_the_project(reason: Reason) -> str:
    fix = reason.fixes[0]
    return (f"{reason.details['problem']} to keep a copy of for {command(KEEP)}; "
            f"is it the project folder? Point {command(fix)} {fix.does}")


def _not_your_folder(reason: Reason) -> str:
    return reason.text.removesuffix(", then keep it again") + f", then {command(KEEP)} again"


def _sources_gone(reason: Reason) -> str:
    fix = reason.fixes[0]
    return (f"the copy of its project's modules kept at {command(KEEP)} ({reason.details['sources']}) is gone; "
            f"run {command(fix)} {fix.does}")


def _not_importable(reason: Reason) -> str:
    d = reason.details
    where = f"the copy of {d['project']} kept at {command(KEEP)} ({d['sources']})" if d.get("sources") else d["project"]
    return f"node {d['node']} ({d['class']}) cannot be imported from {where}: {d['problem']}{d.get('more', '')}"


def _or_command(reason: Reason) -> str:
    return reason.text + ", or " + ", or ".join(command(fix) for fix in reason.fixes)


RENDER: dict[str, Callable[[Reason], str]] = {
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
    "ended_by": _ended_by,
    "stopped_meanwhile": _meanwhile,
    "not_the_project": _not_the_project,
    "not_your_folder": _not_your_folder,
    "sources_gone": _sources_gone,
    "not_importable": _not_importable,
    "internal": _or_command,
    "marked_failed": _command_does,
    "node_failed": _command_does,
    "untrusted": _fixes_with(", "),
}


def render(error: ControlError | Reason) -> str:
    """What the terminal shows for ``error`` (a refusal, or a reason)."""
    if isinstance(error, ControlError):
        error = error.reason
    how = RENDER.get(error.code)
    prefix: str = error.details.get("prefix", "")
    if how is not None and prefix:  # a reason within another ("cam cannot be kept: ..."): word the inner one
        inner = {k: v for k, v in error.details.items() if k != "prefix"}
        return prefix + how(Reason(error.text.removeprefix(prefix), error.code, error.fixes, inner))
    if how is not None:
        return how(error)
    if error.fixes:
        return _fixes_with("; ")(error)
    return error.text


def from_answer(answer: dict[str, Any]) -> str:
    return render(ControlError.from_wire(answer))


def reason_words(entry: dict[str, Any]) -> str | None:
    """An answer's reason in words: its structured ``why`` (a Reason) when it has one, else its text."""
    why = entry.get("why")
    return render(Reason.from_wire(why)) if why else entry.get("reason")


# --- sharing outputs by URL (tatolab url, token, expose, relay) ----------------------------------

UNREACHABLE = ("nothing outside this machine can reach it yet: it has no public address. Join a tailnet "
               "(`tailscale up`), set TATOLAB_MOQ_PUBLIC to this machine's address and restart tatolabd, "
               "or publish into a relay on the internet with `tatolab relay join URL`")
CAPABILITY = "Whoever holds this URL can read it: share it like a password."


def expiry(expires: int | None) -> str:
    """When a token expires, in words (UTC)."""
    import datetime

    if expires is None:
        return "never expires"
    at = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc)
    return f"expires {at:%Y-%m-%d %H:%M} UTC"

