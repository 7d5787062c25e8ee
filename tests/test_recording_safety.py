"""A recording's file (``tatolab record --out``, MCP ``record_start``) is made new, 0600, never
through a link or over a file, whatever another user planted on the way; two recordings never
share one. (McapFile is what the recorder process opens; it calls ``_safe_fs.create_new_file``.)"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from other_user import OtherUser
from tatolab._recorder.file import McapFile
from tatolab._safe_fs import UnsafePath


def _recording(path: Path) -> Path:
    file = McapFile(path)
    file.finish()
    return file.path


def test_a_folder_link_planted_on_the_way_is_refused_and_its_target_untouched(other_user: OtherUser, shared_dir: Path,
                                                                             tmp_path: Path):
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "victim.mcap").write_text("keep")
    link = shared_dir / "recs"
    assert other_user.run(["ln", "-s", str(secret), str(link)]).returncode == 0
    for name in ("new.mcap", "victim.mcap"):
        with pytest.raises(UnsafePath) as refused:
            McapFile(link / name)
        assert str(refused.value).startswith(f"{link} is a symbolic link to {secret} owned by {other_user.name} "
                                             f"(uid {other_user.uid}); the recording must be yours alone")
    assert sorted(p.name for p in secret.iterdir()) == ["victim.mcap"]
    assert (secret / "victim.mcap").read_text() == "keep"
    # a folder of theirs on the way: they could swap a link in at any time
    assert other_user.run(["mkdir", "-m", "755", str(shared_dir / "theirs")]).returncode == 0
    with pytest.raises(UnsafePath, match=f"{shared_dir / 'theirs'} is a folder owned by {other_user.name}"):
        McapFile(shared_dir / "theirs" / "deeper" / "rec.mcap")
    assert not (shared_dir / "theirs" / "deeper").exists()


def test_a_file_another_user_made_first_keeps_theirs_and_they_cannot_read_ours(other_user: OtherUser,
                                                                              shared_dir: Path):
    theirs = shared_dir / "rec.mcap"
    assert other_user.run(["sh", "-c", f"umask 0; : > {theirs}"]).returncode == 0
    got = _recording(theirs)
    assert got == shared_dir / "rec-0001.mcap"
    assert theirs.stat().st_size == 0 and theirs.stat().st_uid == other_user.uid  # never written
    info = got.stat()
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o600 and info.st_size > 0
    read = other_user.run(["cat", str(got)])
    assert read.returncode != 0 and "Permission denied" in read.stderr


def test_an_existing_file_is_never_overwritten_and_two_recordings_never_share_one(tmp_path: Path):
    users = tmp_path / "users"
    users.write_text("root:x:0:0\n")
    users.chmod(0o644)
    assert _recording(users) == tmp_path / "users-0001"
    assert users.read_text() == "root:x:0:0\n"
    out = tmp_path / "new" / "deeper" / "rec.mcap"
    first = _recording(out)
    assert first == out and stat.S_IMODE(first.stat().st_mode) == 0o600
    for folder in (tmp_path / "new", tmp_path / "new" / "deeper"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    before = first.read_bytes()
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(_recording(out))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == [out.with_name(f"rec-{n:04d}.mcap") for n in range(1, 9)]
    assert first.read_bytes() == before


def test_dotdot_and_the_users_own_links_are_followed_and_a_path_through_a_file_refused(tmp_path: Path):
    (tmp_path / "a").mkdir()
    assert _recording(tmp_path / "a" / ".." / "up.mcap") == tmp_path / "a" / ".." / "up.mcap"
    assert (tmp_path / "up.mcap").exists()
    (tmp_path / "a" / "sideways").symlink_to("../b/c")  # a relative link with '..', made on the way
    assert _recording(tmp_path / "a" / "sideways" / "rec.mcap") == tmp_path / "a" / "sideways" / "rec.mcap"
    assert (tmp_path / "b" / "c" / "rec.mcap").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePath, match=f"{tmp_path / 'file'} is not a folder"):
        McapFile(tmp_path / "file" / "rec.mcap")
    # a folder its group may write to, when the group is the user's own: gone through
    (tmp_path / "team").mkdir()
    os.chown(tmp_path / "team", os.getuid(), os.getgid())
    (tmp_path / "team").chmod(0o770)
    assert _recording(tmp_path / "team" / "rec.mcap") == tmp_path / "team" / "rec.mcap"
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(UnsafePath, match=f"{tmp_path / 'open'} is a folder other users can write to \\(mode 777\\)"):
        McapFile(tmp_path / "open" / "rec.mcap")
    # a link of the user's own (in a folder only they can change) is followed
    (tmp_path / "mine").symlink_to(tmp_path / "a")
    assert _recording(tmp_path / "mine" / "rec.mcap") == tmp_path / "mine" / "rec.mcap"
    assert (tmp_path / "a" / "rec.mcap").exists()


def test_numbered_files_of_a_split_or_window_pass_over_a_file_or_link_there(tmp_path: Path):
    """``out-1.mcap``...: each made by create_new_file (O_EXCL), so a name taken, by a file or a link
    planted there, is passed over for the next number, never opened or written through."""
    from tatolab._recorder.window import numbered

    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "out-1.mcap").write_text("an earlier file")
    (tmp_path / "out-2.mcap").symlink_to(target)
    made = numbered(tmp_path / "out.mcap", 1, "zstd")
    made.finish()
    assert made.path == tmp_path / "out-3.mcap"
    assert stat.S_IMODE(os.stat(made.path).st_mode) == 0o600
    assert (tmp_path / "out-1.mcap").read_text() == "an earlier file" and target.read_text() == "keep"
    fourth = numbered(tmp_path / "out.mcap", 4, "zstd")
    fourth.finish()
    assert fourth.path == tmp_path / "out-4.mcap"
