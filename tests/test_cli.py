"""The `tatolab` command's own words, without a runtime: usage, suggestions, counted nouns."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

from harness import BIN

from tatolab import __file__ as TATOLAB_INIT
from tatolab import __version__

from tatolab._cli.expose import MEANING
from tatolab._cli.inspect import tap_summary, trouble_lines
from tatolab._cli import wheels
from tatolab._cli.sdk import keep_sdk_wheel, point_uv_at
from tatolab._cli.wheels import LIMITED_API, tatolab_tag
from tatolab._words import counted


def tatolab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tatolab"), *args], capture_output=True, text=True, timeout=30)


def test_an_unknown_option_shows_the_usage_of_its_command():
    result = tatolab("run", "--dri")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: tatolab run ")
    assert result.stderr.rstrip().endswith("tatolab run: error: unrecognized arguments: --dri")
    nested = tatolab("service", "install", "--nwo")
    assert nested.stderr.startswith("usage: tatolab service install ")


def test_a_mistyped_command_gets_a_suggestion():
    result = tatolab("strams")
    assert result.returncode == 2
    assert "did you mean `tatolab streams`?" in result.stderr
    nested = tatolab("service", "instal")
    assert "did you mean `tatolab service install`?" in nested.stderr
    assert "did you mean" not in tatolab("xyzzy").stderr  # nothing close: no guess


def test_counts_use_the_singular_for_one():
    assert counted(1, "node") == "1 node"
    assert counted(0, "node") == "0 nodes"
    assert counted(3, "bag") == "3 bags"
    node = {"stream": "s", "name": "n", "state": "crashed", "restarts": 1}
    assert trouble_lines([node]) == ["s/n crashed, restarted 1 time. `tatolab logs --stream s --node n` shows more."]
    assert tap_summary("s/n/p", {"got": 1, "reason": "count", "dropped": 1}, 1, 0.2) == \
        "tap: got 1 of 1 bag from s/n/p in 0.2 s; the tap skipped 1 bag"


def test_public_says_other_machines_read_it_by_url():
    assert "your other machines can read it by URL" in MEANING["public"]
    assert "`tatolab url`" in MEANING["public"] and "`tatolab url`" in MEANING["private"]


def test_sdk_points_uv_at_the_wheel_in_any_pyproject(tmp_path: Path):
    wheel = Path("/state/tatolab/sdk/tatolab-0.1.0-py3-none-any.whl")
    line = f'tatolab = {{ path = "{wheel}" }}'
    bare = tmp_path / "bare.toml"
    bare.write_text('[project]\nname = "p"\n')
    point_uv_at(bare, wheel)
    assert bare.read_text().startswith('[project]\nname = "p"\n\n[tool.uv.sources]\n')
    assert bare.read_text().endswith(line + "\n")

    other = tmp_path / "other.toml"
    other.write_text('[tool.uv.sources]\nmylib = { path = "../mylib" }\n\n[tool.ruff]\nline-length = 100\n')
    point_uv_at(other, wheel)
    assert other.read_text() == (f'[tool.uv.sources]\n{line}\nmylib = {{ path = "../mylib" }}\n\n'
                                 '[tool.ruff]\nline-length = 100\n')

    stale = tmp_path / "stale.toml"
    stale.write_text('[tool.uv.sources]\ntatolab = { path = "/old/tatolab-0.0.9-py3-none-any.whl" }\n')
    point_uv_at(stale, wheel)
    assert stale.read_text() == f"[tool.uv.sources]\n{line}\n"
    assert "already" in point_uv_at(stale, wheel)


def test_a_kept_sdk_wheel_is_never_rewritten_so_uv_locks_stay_true(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    first = keep_sdk_wheel()
    assert first.name == f"tatolab-{__version__}-{tatolab_tag(Path(TATOLAB_INIT).parent)}.whl"
    stamp = first.stat().st_mtime_ns, first.read_bytes()
    assert keep_sdk_wheel() == first and (first.stat().st_mtime_ns, first.read_bytes()) == stamp

    packed = wheels.pack_tatolab  # (sdk.py imports it as it packs)

    def edited(out_dir: Path) -> Path:  # the runtime's code changed, its version did not (a checkout)
        wheel = packed(out_dir)
        with zipfile.ZipFile(wheel) as archive:
            entries = {name: archive.read(name) for name in archive.namelist()}
        entries[f"tatolab-{__version__}.dist-info/RECORD"] += b"tatolab/edited.py,,0\n"
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, data in entries.items():
                archive.writestr(name, data)
        return wheel

    monkeypatch.setattr(wheels, "pack_tatolab", edited)
    second = keep_sdk_wheel()
    assert second != first and second.name == first.name
    assert (first.stat().st_mtime_ns, first.read_bytes()) == stamp  # the first project's wheel, untouched


def test_a_name_that_starts_with_a_dash_needs_no_double_dash():
    from tatolab._cli.main import build_parser

    assert build_parser(["stop", "-x"]).parse_args(["stop", "-x"]).name == "-x"
    logs = build_parser(["logs"]).parse_args(["logs", "--stream", "-x", "--node", "-n"])
    assert (logs.stream, logs.node) == ("-x", "-n")
    result = tatolab("stop", "-x")  # no runtime here: it got as far as asking for stream -x
    assert "usage:" not in result.stderr and "no runtime is running" in result.stderr, result.stderr
    assert tatolab("streams", "-z").stderr.rstrip().endswith("unrecognized arguments: -z")  # still no such option


def test_the_sdk_wheel_is_tagged_for_what_it_holds(tmp_path: Path):
    """A wheel carrying the compiled module names the Python, ABI and platform it was built
    for (pip elsewhere refuses it, saying so); a pure one installs anywhere."""
    import sysconfig

    pure = tmp_path / "pure" / "tatolab"
    (pure / "_links").mkdir(parents=True)
    (pure / "_links" / "ring.py").write_text("")
    assert tatolab_tag(pure) == "py3-none-any"
    (pure / "_links" / "_native.abi3.so").write_bytes(b"")
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert tatolab_tag(pure) == f"{LIMITED_API}-abi3-{platform}"
    # the stable ABI's oldest Python is the one _native.c is compiled for
    source = (Path(TATOLAB_INIT).parent / "_links" / "_native.c").read_text()
    assert "#define Py_LIMITED_API 0x030B0000" in source and LIMITED_API == "cp311"

    wheel = wheels.pack_tatolab(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        held = archive.namelist()
        info = archive.read(f"tatolab-{__version__}.dist-info/WHEEL").decode()
    compiled = any(name.endswith(".so") for name in held)
    assert wheel.name.endswith("-py3-none-any.whl") is not compiled
    assert f"Tag: {wheel.name.removesuffix('.whl').split('-', 2)[2]}\n" in info
    assert ("Root-Is-Purelib: false" in info) is compiled


def test_expose_public_says_one_true_line_whether_or_not_other_machines_can_reach_it():
    from tatolab._cli.expose import exposed_line

    unreachable = exposed_line({"address": "cam/camera/video", "kept": True, "cut": [], "reachable": False}, "public")
    assert unreachable.startswith("cam/camera/video is public (recorded for the kept stream), but nothing outside "
                                  "this machine can reach it yet")
    assert "your other machines can read it" not in unreachable and "\n" not in unreachable
    reachable = exposed_line({"address": "cam/camera/video", "kept": False, "cut": [], "reachable": True}, "public")
    assert reachable == ("cam/camera/video is public: your other machines can read it by URL too, over your "
                         "tailnet (`tatolab url` gives its URL)")
