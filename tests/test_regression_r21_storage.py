"""r21-storage defects 1-3: the error a user sees when the storage under a spill store or
an SQLite cursor store fails, and a spill directory swapped after its store was made.

No test needs root or a mount: the failures are made with what any user may do to files
of their own, and hold as root too (root may write to a read-only directory, but cannot
unlink a directory or create a file under a regular file).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jsonbudget import (
    Limits,
    MemoryCursorStore,
    ResultGate,
    Scope,
    SpillError,
    SpillStore,
    SQLiteCursorStore,
    TurnBudget,
    paginate,
)

BIG = {"rows": ["y" * 60] * 200}


def _replace_by_file(directory: Path) -> None:
    shutil.rmtree(directory)
    directory.write_text("x")


# -- 1: SpillStore.put's I/O failures are SpillError ------------------------------------


def test_regression_put_into_a_directory_replaced_by_a_file_raised_not_a_directory_error(
    tmp_path: Path,
) -> None:
    # Creating the temporary file failed (ENOTDIR) as SpillError, and the clean-up's
    # unlink failed the same way, its bare NotADirectoryError raised in its place.
    directory = tmp_path / "spill"
    store = SpillStore(directory)
    rows = [{"id": i, "body": "z" * 5000 if i == 3 else "s"} for i in range(10)]
    scope, cursors, limits = Scope("a", {"q": 1}), MemoryCursorStore(), Limits(1000)
    first = paginate(
        rows, scope=scope, store=cursors, limits=limits, oversized="spill", spill_store=store
    )
    assert first.next_cursor is not None
    _replace_by_file(directory)
    calls: dict[str, Callable[[], object]] = {
        "put": lambda: store.put(b"[2]", label="a"),
        "gate": lambda: ResultGate(max_bytes=2000, store=store).gate(BIG),
        "admit": lambda: TurnBudget(max_bytes=3000, store=store).admit(BIG),
        "paginate": lambda: paginate(
            rows,
            scope=scope,
            store=cursors,
            limits=limits,
            oversized="spill",
            spill_store=store,
            cursor=first.next_cursor,
        ),
    }
    for call in calls.values():
        with pytest.raises(SpillError, match="cannot create a spill file") as info:
            call()
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.ENOTDIR
        assert str(directory) not in str(info.value)  # no path of the user's in it
    # Once the directory is back, the same store and cursor work again.
    directory.unlink()
    directory.mkdir(mode=0o700)
    again = paginate(
        rows,
        scope=scope,
        store=cursors,
        limits=limits,
        oversized="spill",
        spill_store=store,
        cursor=first.next_cursor,
    )
    assert again.items


def test_regression_a_failed_clean_up_of_the_temporary_file_hid_the_put_error(
    tmp_path: Path,
) -> None:
    # The clean-up's unlink ignored only FileNotFoundError: any other failure (EROFS on
    # a file system made read-only, here EISDIR) replaced the error on its way out.
    directory = tmp_path / "spill"
    store = SpillStore(directory, max_file_bytes=10)

    def chunks() -> Iterator[bytes]:
        yield b"12345"
        # The put's temporary file, now written, made something unlink cannot remove.
        (temp,) = [p for p in directory.iterdir() if p.name.startswith(".tmp-")]
        temp.unlink()
        temp.mkdir()
        yield b"x" * 100  # past max_file_bytes: the put fails and removes its file

    with pytest.raises(SpillError, match="larger than the store's max_file_bytes") as info:
        store.put(chunks(), label="a")
    assert info.value.__notes__ == [
        f"removing the temporary spill file failed too: {os.strerror(errno.EISDIR)}"
    ]

    def failing() -> Iterator[bytes]:
        yield b"1"
        (temp,) = [p for p in directory.iterdir() if p.name.startswith(".tmp-") and p.is_file()]
        temp.unlink()
        temp.mkdir()
        raise ValueError("the caller's own")

    with pytest.raises(ValueError, match="the caller's own") as caller:  # unchanged
        store.put(failing(), label="b")
    assert len(caller.value.__notes__) == 1
    assert store.read(store.put(b"[1]", label="c").ref) == b"[1]"  # and the store works


# -- 2: SQLiteCursorStore on a file it cannot make private --------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_regression_sqlite_store_on_a_file_it_cannot_chmod_raised_permission_error() -> None:
    # /proc/self/status is ours, mode 0444, and no chmod of it is allowed (EPERM, root
    # included): as a store file on a read-only mount (EROFS), it made a bare OSError.
    with pytest.raises(sqlite3.OperationalError, match="unable to open database file") as info:
        SQLiteCursorStore("/proc/self/status")
    assert isinstance(info.value.__cause__, PermissionError)
    assert info.value.sqlite_errorname == "SQLITE_CANTOPEN"
    assert "/proc" not in str(info.value)


def test_regression_sqlite_store_whose_wal_name_cannot_be_statted_raised_os_error(
    tmp_path: Path,
) -> None:
    # The longest file name a directory takes: its "-wal" name is one no file can have,
    # which SQLite could never create either (ENAMETOOLONG from the stat of it).
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("s" * name_max)
    with pytest.raises(sqlite3.OperationalError, match="unable to open database file") as info:
        SQLiteCursorStore(path)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENAMETOOLONG


# -- 3: a spill directory swapped after its store was made -------------------------------


def test_regression_put_followed_a_symlink_that_replaced_the_spill_directory(
    tmp_path: Path,
) -> None:
    # The constructor's checks ran once: a put wrote into wherever the path led later.
    directory = tmp_path / "spill"
    store = SpillStore(directory)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: the constructor refuses it
    with pytest.raises(SpillError, match="writable by group or others"):
        SpillStore(shared)
    shutil.rmtree(directory)
    directory.symlink_to(shared)
    with pytest.raises(SpillError, match="no longer a directory") as info:
        store.put(b"[2]", label="a")
    assert info.value.__cause__ is not None
    assert os.listdir(shared) == []  # nothing was written through the symlink
    # A private directory of ours behind a symlink is not followed either.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    directory.unlink()
    directory.symlink_to(private)
    with pytest.raises(SpillError, match="no longer a directory"):
        store.put(b"[2]", label="a")
    assert os.listdir(private) == []


def test_regression_put_used_a_spill_directory_remade_open_to_others(tmp_path: Path) -> None:
    directory = tmp_path / "spill"
    store = SpillStore(directory)
    shutil.rmtree(directory)
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(SpillError, match=r"writable by group or others \(mode 777\)"):
        store.put(b"[2]", label="a")
    assert os.listdir(directory) == []
    # Made anew private, as the constructor would take it, the store uses it.
    directory.chmod(0o700)
    ref = store.put(b"[3]", label="a")
    assert store.read(ref.ref) == b"[3]"
    assert ref.path == directory / ref.ref
