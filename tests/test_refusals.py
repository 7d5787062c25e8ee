"""Refused network sessions are counted and said in summary, per listener and interval: a flood of
them (each with a long path of its own) writes a few lines, never one each (tatolab/_runtime/relay/refusals.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from harness import read_jsonl, wait_for
from test_moq import source_project, url_of

from tatolab._runtime.relay.refusals import Refusals

FLOOD = Path(__file__).resolve().parent / "moq_flood.py"
NO_TOKEN = "the URL has no token (?jwt=...); ask the output's owner for its URL"


def test_a_flood_is_said_in_a_few_lines_per_interval_whatever_its_paths():
    refusals = Refusals(every_s=10)
    said, due = [], []
    for i in range(5_000):
        line, at = refusals.refused("loopback", f"p{i}-" + "x" * 900, NO_TOKEN, 100 + i / 1000)
        said += [line] if line else []
        due += [at] if at is not None else []
    assert said == [f"MoQ relay refused a session for p0-{'x' * 77}... (903 characters) (loopback): {NO_TOKEN}"]
    assert due == [110.001]  # one summary, 10 s after the first refusal counted
    assert refusals.summary("loopback", 110) is None  # not over yet
    assert refusals.summary("loopback", 110.001) == (
        f"MoQ relay refused 4999 more sessions on the loopback listener in 10 s, not logged one by one "
        f"(4999 {NO_TOKEN}); 5000 refused there since the relay started")
    assert refusals.summary("loopback", 111) is None  # said once
    # the flood goes on: the next interval is twice as long, and so on up to 10 minutes
    lengths = []
    now = 111.0
    for _ in range(8):
        line, at = refusals.refused("loopback", "p", NO_TOKEN, now)
        if line is not None:  # 10 minutes on: the reason is said at once again, and the next one counted
            line, at = refusals.refused("loopback", "p", NO_TOKEN, now)
        assert line is None and at is not None
        lengths.append(at - now)
        assert refusals.summary("loopback", at) is not None
        now = at
    assert lengths == [20, 40, 80, 160, 320, 600, 600, 600]
    # after a quiet interval it starts short again; another reason, or one with another number or
    # quoted name in it, is said at once only the first time
    assert refusals.refused("loopback", "p", NO_TOKEN, now + 700)[0] is not None  # 10 minutes on: said
    assert refusals.refused("loopback", "p", NO_TOKEN, now + 700) == (None, now + 710)
    algorithm = "the token's algorithm 'HS512' is not accepted (only HS256)"
    assert refusals.refused("loopback", "p", algorithm, now + 700)[0] is not None
    assert refusals.refused("loopback", "p", algorithm.replace("HS512", "x" * 20), now + 701)[0] is None
    assert refusals.refused("public", "p", algorithm, now + 701)[0] is not None  # each listener its own


@pytest.mark.slow
def test_a_flood_of_refused_sessions_writes_a_few_log_lines_and_costs_the_runtime_little(
        runtime, project_venv, tmp_path):
    runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv), check=True)
    url, fingerprint = url_of(runtime)  # the relay serves: an exposed output
    root = f"https://127.0.0.1:{runtime.env['TATOLAB_MOQ_PORT']}/"
    log = runtime.root / "state" / "tatolab" / "runtime.jsonl"
    before = len(read_jsonl(log))
    assert runtime.process is not None
    tatolabd = psutil.Process(runtime.process.pid)
    cpu_before = sum(tatolabd.cpu_times()[:2])
    n = 300
    done = subprocess.run([sys.executable, str(FLOOD), fingerprint, root, str(n)],
                          capture_output=True, text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"refused": n, "other": []}, (result, done.stderr[-2000:])
    cpu = sum(tatolabd.cpu_times()[:2]) - cpu_before
    summary = wait_for(lambda: [r for r in read_jsonl(log)[before:] if "not logged one by one" in r["message"]],
                       timeout=60, what="the refusals' summary line")
    records = read_jsonl(log)[before:]
    refusals = [r for r in records if "MoQ relay refused" in r["message"]]
    print(f"{n} refused sessions: {len(records)} log lines ({len(refusals)} about them), "
          f"tatolabd CPU {cpu:.2f} s ({cpu / n * 1000:.1f} ms a session)")
    assert len(refusals) == 2, [r["message"][:120] for r in refusals]  # the first, then one summary
    assert refusals[0]["message"].startswith("MoQ relay refused a session for ")
    assert "(900 characters)" in refusals[0]["message"]
    assert summary[0]["message"].startswith(f"MoQ relay refused {n - 1} more sessions on the loopback listener")
    assert all(len(r["message"]) < 400 for r in refusals)
