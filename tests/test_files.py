"""harness/core/files.py: a folder written through ``replacing_folder`` appears whole or not at all —
it replaces an existing one, an error while writing leaves the old one as it was and no temporary
folder behind, and a folder another writer put in place meanwhile is replaced or, when asked, kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.files import exclusive_lock, remove_temporaries, replacing_folder


def _siblings(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir() if p.name != dest.name)


def _write(folder: Path, text: str) -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "weights.bin").write_text(text)
    (folder / "card.json").write_text(text)


def test_a_new_folder_is_made_with_its_parents(tmp_path: Path) -> None:
    dest = tmp_path / "models" / "coder" / "abc"
    with replacing_folder(dest) as tmp:
        assert tmp.is_dir() and not any(tmp.iterdir()) and tmp.parent == dest.parent and tmp.name.endswith(".tmp")
        assert not dest.exists()  # nothing is seen before the block ends
        _write(tmp, "new")
    assert (dest / "sub" / "weights.bin").read_text() == "new" and _siblings(dest) == []


def test_an_existing_folder_is_replaced_whole(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    dest.mkdir()
    _write(dest, "old")
    (dest / "only-in-old.txt").write_text("x")
    with replacing_folder(dest) as tmp:
        _write(tmp, "new")
        assert (dest / "card.json").read_text() == "old"  # the old one serves until the rename
    assert sorted(p.name for p in dest.iterdir()) == ["card.json", "sub"]
    assert (dest / "card.json").read_text() == "new" and _siblings(dest) == []


def test_an_error_while_writing_keeps_the_old_folder_and_leaves_no_temporary(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    dest.mkdir()
    _write(dest, "old")
    with pytest.raises(RuntimeError, match="training failed"):
        with replacing_folder(dest) as tmp:
            _write(tmp, "half")
            raise RuntimeError("training failed")
    assert (dest / "card.json").read_text() == "old" and (dest / "sub" / "weights.bin").read_text() == "old"
    assert _siblings(dest) == []
    with pytest.raises(KeyboardInterrupt):  # an interrupt too
        with replacing_folder(tmp_path / "new") as tmp:
            _write(tmp, "half")
            raise KeyboardInterrupt
    assert not (tmp_path / "new").exists() and _siblings(dest) == []


def test_a_failed_rename_puts_the_old_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "m"
    dest.mkdir()
    _write(dest, "old")
    real_rename = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == dest and Path(src).name.endswith(".tmp") and not Path(src).name.endswith(".old.tmp") \
                and not dest.exists():  # the new folder's rename, once the old one is aside
            raise OSError("disk full")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="disk full"):
        with replacing_folder(dest) as tmp:
            _write(tmp, "new")
    assert (dest / "card.json").read_text() == "old" and _siblings(dest) == []


def test_a_folder_another_writer_put_in_place_meanwhile(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    with replacing_folder(dest) as tmp:  # by default the last writer's folder is kept
        _write(tmp, "ours")
        dest.mkdir()
        _write(dest, "theirs")
    assert (dest / "card.json").read_text() == "ours" and _siblings(dest) == []
    other = tmp_path / "n"
    asked: list[Path] = []
    with replacing_folder(other, keep_existing=lambda d: asked.append(d) or True) as tmp:
        _write(tmp, "ours")
        other.mkdir()
        _write(other, "theirs")
    assert asked == [other] and (other / "card.json").read_text() == "theirs" and _siblings(other) == ["m"]


def test_mode_is_set_on_the_new_folder(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    with replacing_folder(dest, mode=0o755) as tmp:
        (tmp / "f").write_text("x")
    assert dest.stat().st_mode & 0o777 == 0o755


def test_temporaries_left_by_a_killed_writer_are_removed(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    for name in (".m.1234.tmp", ".m.ab12.old.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
    (tmp_path / ".other.1.tmp").mkdir()
    (tmp_path / ".m.lock").write_text("")
    with exclusive_lock(tmp_path / ".m.lock") as locked:
        assert locked in (True, False)
        remove_temporaries(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", ".other.1.tmp"]
