"""The reliability suite at full size; writes docs/reliability.md from what it measured.

    .venv/bin/python bench/reliability.py                     # everything, full sizes (about 40 min on 2 cores)
    .venv/bin/python bench/reliability.py --only soak churn   # some scenarios
    .venv/bin/python bench/reliability.py --reduced           # the sizes the tests use
    .venv/bin/python bench/reliability.py --churn-cycles 200 --soak-seconds 120 --out /tmp/r.md
    .venv/bin/python bench/reliability.py --update --only kill-runtime   # rerun one, keep the others' figures
    .venv/bin/python bench/reliability.py --rewrite                      # the report again from its stored results

The scenarios are tests/reliability.py's, the same ones tests/test_reliability.py runs reduced.
Each starts its own tatolabd on temporary paths; the project .venv is this interpreter's.
The report is rewritten after every scenario, so an interrupted run still leaves its figures.
Exits 1 when any scenario found a problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import reliability  # noqa: E402  (tests/reliability.py: the scenarios)
from reliability import Result  # noqa: E402

FULL = {"churn_cycles": 1000, "soak_seconds": 600, "kill_seconds": 120, "runtime_kills": 20,
        "hog_restarts": 5, "fuzz_examples": 3000, "bag_examples": 500}
REDUCED = {"churn_cycles": 30, "soak_seconds": 20, "kill_seconds": 8, "runtime_kills": 3,
           "hog_restarts": 2, "fuzz_examples": 150, "bag_examples": 40}


def run_one(name: str, sizes: dict[str, int], scratch: Path) -> Result:
    setup = reliability.Setup(scratch / name, Path(sys.prefix))
    setup.scratch.mkdir(parents=True)
    args: dict[str, Any] = {
        "churn": {"cycles": sizes["churn_cycles"]},
        "soak": {"seconds": sizes["soak_seconds"]},
        "kill-nodes": {"seconds": sizes["kill_seconds"]},
        "kill-runtime": {"kills": sizes["runtime_kills"]},
        "memory-hog": {"restarts": sizes["hog_restarts"]},
        "fuzz-control": {"examples": sizes["fuzz_examples"]},
        "fuzz-bags": {"examples": sizes["bag_examples"]},
    }.get(name, {})
    began = time.monotonic()
    ran_at = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}"
    try:
        result = reliability.SCENARIOS[name](setup, **args)
    except Exception as exc:  # noqa: BLE001 - a scenario that breaks is reported, and the others still run
        result = Result(name, problems=[f"the scenario itself failed: {exc!r}",
                                        traceback.format_exc().strip().splitlines()[-1]])
    result.figures.setdefault("wall_s", round(time.monotonic() - began, 1))
    result.figures["size"] = args
    result.figures["ran"] = ran_at
    return result


RESULTS_MARK = "<!-- reliability results (read back by --update): "


def read_previous(path: Path) -> dict[str, Result]:
    """The results a report holds, to keep those of scenarios not run again."""
    if not path.exists():
        return {}
    found = re.search(re.escape(RESULTS_MARK) + r"(.*) -->", path.read_text())
    if not found:
        return {}
    return {name: Result(**fields) for name, fields in json.loads(found.group(1)).items()}


def summary(name: str, r: Result) -> str:
    """One sentence of what the scenario held, in figures."""
    f = r.figures
    if r.skipped:
        return f"skipped: {r.skipped}"
    try:
        if name == "churn":
            return (f"{f['cycles']} load/stop cycles (attached, kept then stopped, kept then removed, in turn) in "
                    f"{f['seconds']} s; {f['processes_started']} processes seen under the runtime, none left; runtime memory "
                    f"{f['runtime_rss_start_mib']} → {f['runtime_rss_end_mib']} MiB, descriptors "
                    f"{f['runtime_fds_start']} → {f['runtime_fds_end']}")
        if name == "soak":
            return (f"{f['nodes']} nodes for {f['seconds']} s at {f['bags_per_second']} bags/s: {f['bags_written']} bags "
                    f"written, {f['ordered_rows']} through three ordered relays, {f['ordered_dropped']} dropped on "
                    f"ordered links, {f['newest_dropped']} skipped by the slow newest reader (counted); "
                    f"/dev/shm entries {f['shm_entries']}, runtime descriptors {f['runtime_fds']}")
        if name == "kill-nodes":
            return (f"{f['kills']} SIGKILLs of a random node, one a second: {f['restarts']} restarts, "
                    f"bags flowing again afterwards: {f['flowing_after']}")
        if name == "sigstop":
            return (f"a SIGSTOPped node reported hung {f['hangs']} time(s) and replaced after {f['recovered_s']} s")
        if name == "kill-runtime":
            return (f"{f['runtime_kills']} SIGKILLs of the runtime with two kept streams under load; streams back "
                    f"afterwards: {f['streams_back']}; processes outliving a killed runtime: {f['orphans']}")
        if name == "memory-hog":
            return (f"a node allocating without bound restarted {f['memory_restarts']} times by its "
                    f"memory_limit_mb={f['limit_mb']}, its neighbours untouched; runtime memory {f['runtime_rss_mib']} MiB")
        if name == "full-disk":
            return f"state folder and logs on a full tmpfs: {f['held']} checks held ({f['checks']})"
        if name == "fuzz-control":
            return (f"{f['tried']} requests tried ({f['by_kind']}); {f['unclear_answers']} without a clear error; "
                    f"another client answered {f['bystander_answers']} times meanwhile, slowest {f['bystander_slowest_s']} s")
        if name == "fuzz-bags":
            return (f"{f['bad_bags']} bags that do not decode, each beside a good one: {f['good_bags']} good bags "
                    f"arrived, {f['counted_bad']} counted bad on the link, reader restarts {f['reader_restarts']}")
    except KeyError:
        pass
    return ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("size", "ran"))


def commit() -> str:
    """The checked-out commit, marked dirty when files other than this report differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/reliability.md")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changed else "")


def write_report(path: Path, results: dict[str, Result], command: str, pending: list[str]) -> None:
    results = {n: results[n] for n in reliability.SCENARIOS if n in results}
    held = [n for n, r in results.items() if not r.problems and not r.skipped]
    lines = [
        "# Reliability",
        "",
        f"Written by `{command}` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"commit {commit()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{'root' if os.geteuid() == 0 else 'not root'}. Do not edit by hand: run it again. Each scenario "
        "below says its size and when it ran (`--update` reruns some and keeps the others).",
        "",
        "The scenarios are `tests/reliability.py`; `tests/test_reliability.py` runs the same ones reduced "
        "(in CI). Each starts its own `tatolabd` on temporary paths and checks that nothing of it is left "
        "afterwards: no process, shared-memory file or socket.",
        "",
        f"**{len(held)} of {len(results)} scenarios held.**" + (f" Not run yet: {', '.join(pending)}." if pending else ""),
        "",
        "| scenario | held | what it measured |",
        "|---|---|---|",
    ]
    for name, r in results.items():
        verdict = "skipped" if r.skipped else ("yes" if not r.problems else f"**no** ({len(r.problems)} problems)")
        lines.append(f"| {name} | {verdict} | {summary(name, r)} ({r.figures.get('wall_s', '?')} s) |")
    lines += ["", "## What each found", ""]
    for name, r in results.items():
        doc = (reliability.SCENARIOS[name].__doc__ or "").strip().splitlines()
        lines += [f"### {name}", "", " ".join(line.strip() for line in doc), ""]
        if r.problems:
            lines += ["Problems:", ""] + [f"- {p}" for p in r.problems] + [""]
        else:
            lines += ["No problems." if not r.skipped else f"Skipped: {r.skipped}", ""]
        figures = {k: v for k, v in r.figures.items() if k != "wall_s"}
        lines += [f"Ran {figures.pop('ran', '?')}, size {figures.pop('size', {})}.", ""]
        if figures:
            lines += ["```", *(f"{k}: {v}" for k, v in figures.items()), "```", ""]
    lines.append(RESULTS_MARK + json.dumps({n: dataclasses.asdict(r) for n, r in results.items()}) + " -->")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(reliability.SCENARIOS), help="run these scenarios only")
    parser.add_argument("--skip", nargs="+", default=[], choices=list(reliability.SCENARIOS))
    parser.add_argument("--reduced", action="store_true", help="the sizes the tests use")
    for key, value in FULL.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, help=f"full size: {value}")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    parser.add_argument("--update", action="store_true", help="keep the report's results of scenarios not run now")
    parser.add_argument("--rewrite", action="store_true", help="run nothing: write the report again from its results")
    args = parser.parse_args(argv)
    sizes = dict(REDUCED if args.reduced else FULL)
    for key in FULL:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    names = [n for n in (args.only or reliability.SCENARIOS) if n not in args.skip]
    command = "bench/reliability.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Result] = read_previous(args.out) if args.update or args.rewrite else {}
    if args.rewrite:
        write_report(args.out, results, command.strip(), [])
        return 0
    with tempfile.TemporaryDirectory(prefix="tatolab-reliability-") as tmp:
        for i, name in enumerate(names):
            print(f"{name} ...", flush=True)
            results[name] = run_one(name, sizes, Path(tmp))
            r = results[name]
            print(f"  {'skipped' if r.skipped else 'held' if not r.problems else 'FAILED'}: {summary(name, r)}", flush=True)
            for problem in r.problems:
                print(f"  - {problem}", flush=True)
            write_report(args.out, results, command.strip(), names[i + 1:])
    print(f"wrote {args.out}")
    return 1 if any(results[n].problems for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
