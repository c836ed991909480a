"""SpillStore: private directory, atomic 0600 files, hostile labels, retention, bounded reads."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import ResultGate, ResultReader, SpillRef, SpillStore
from jsonbudget._agents.spill import default_spill_dir, sanitize_label
from jsonbudget.errors import LimitError, SpillError
from tests.limited import run_limited


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def visible_files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_put_writes_whole_file_mode_0600_named_by_hash(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    data = b'{"rows": [1, 2, 3]}'
    ref = store.put(data, label="search_tool")
    digest = hashlib.sha256(data).hexdigest()
    assert ref.sha256 == digest
    assert ref.size == len(data)
    assert ref.ref == f"search_tool.{digest}.json"
    assert ref.path == store.directory / ref.ref
    assert ref.path.read_bytes() == data
    assert mode_of(ref.path) == 0o600
    assert mode_of(store.directory) == 0o700
    assert ref.to_json() == {
        "ref": ref.ref,
        "size": len(data),
        "sha256": digest,
        "media_type": "application/json",
    }
    assert ref.to_json(include_path=True)["path"] == str(ref.path)


def test_created_directory_is_0700_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = SpillStore(tmp_path / "a")
    finally:
        os.umask(old)
    assert mode_of(store.directory) == 0o700
    ref = store.put(b"x", label="t")
    assert mode_of(ref.path) == 0o600


def test_default_directory_is_private_under_xdg_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_spill_dir() == tmp_path / "cache" / "jsonbudget" / "spill"
    store = SpillStore()
    assert store.directory == tmp_path / "cache" / "jsonbudget" / "spill"
    assert mode_of(store.directory) == 0o700


def test_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_spill_dir() == Path.home() / ".cache" / "jsonbudget" / "spill"


def test_default_directory_group_writable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spill = tmp_path / "jsonbudget" / "spill"
    spill.mkdir(parents=True)
    os.chmod(spill, 0o770)
    with pytest.raises(SpillError, match="writable by group or others"):
        SpillStore()
    os.chmod(spill, 0o707)
    with pytest.raises(SpillError, match="writable by group or others"):
        SpillStore()


def test_default_directory_owned_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can hand a directory to another user")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spill = tmp_path / "jsonbudget" / "spill"
    spill.mkdir(parents=True, mode=0o700)
    os.chown(spill, 65534, 65534)  # nobody
    with pytest.raises(SpillError, match="owned by another user"):
        SpillStore()


def test_directory_that_is_a_symlink_or_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "jsonbudget").mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "jsonbudget" / "spill").symlink_to(target)
    with pytest.raises(SpillError, match="not a directory"):
        SpillStore()
    afile = tmp_path / "afile"
    afile.write_bytes(b"")
    with pytest.raises(SpillError, match="not a directory"):
        SpillStore(afile)


def test_streams_iterable_chunks_and_files(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    chunks: list[bytes | bytearray | memoryview] = [
        b"a" * 1000,
        bytearray(b"b" * 10),
        memoryview(b"c" * 5),
    ]
    ref = store.put(iter(chunks), label="t", media_type="text/plain")
    assert ref.path.read_bytes() == b"a" * 1000 + b"b" * 10 + b"c" * 5
    assert ref.ref.endswith(".txt")
    big = io.BytesIO(os.urandom(3 * 1024 * 1024 + 7))
    ref2 = store.put(big, label="file", media_type="application/octet-stream")
    assert ref2.path.read_bytes() == big.getvalue()
    assert ref2.sha256 == hashlib.sha256(big.getvalue()).hexdigest()


def test_same_content_and_label_is_one_file(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    a = store.put(b"same", label="t")
    b = store.put([b"sa", b"me"], label="t")
    assert a == b
    assert visible_files(tmp_path) == [a.ref]


def test_crash_mid_write_leaves_no_partial_file_and_no_temp(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)

    class ToolCrashed(RuntimeError):
        pass

    def crashing() -> Iterator[bytes]:
        yield b"x" * (2 * 1024 * 1024)
        yield b"y" * 1000
        raise ToolCrashed("halfway")

    with pytest.raises(ToolCrashed, match="halfway"):
        store.put(crashing(), label="t")
    assert visible_files(tmp_path) == []


def test_non_bytes_chunk_mid_stream_leaves_nothing(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    with pytest.raises(TypeError, match="must be bytes"):
        store.put(iter([b"ok", "text"]), label="t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not str"):
        store.put("text", label="t")  # type: ignore[arg-type]
    assert visible_files(tmp_path) == []


def test_result_larger_than_max_file_bytes_is_refused_and_removed(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, max_total_bytes=1000, max_file_bytes=100)
    with pytest.raises(SpillError, match="max_file_bytes"):
        store.put(iter([b"x" * 60, b"x" * 60]), label="t")
    assert visible_files(tmp_path) == []


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("../../etc/passwd", "etc_passwd"),
        ("a\x00b", "a_b"),
        ("..", "result"),
        ("", "result"),
        ("/", "result"),
        ("tool\nname\r\x1b[31m", "tool_name_31m"),
        ("Résumé Tool", "resume_tool"),
        ("C:\\Windows\\system32", "c_windows_system32"),
        ("-rf", "rf"),
    ],
)
def test_hostile_labels_are_sanitized(tmp_path: Path, label: str, expected: str) -> None:
    assert sanitize_label(label) == expected
    store = SpillStore(tmp_path)
    ref = store.put(b"data", label=label)
    assert ref.label == expected
    assert ref.path.parent == tmp_path
    assert ref.path.exists()


def test_ten_thousand_character_label_is_bounded(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    ref = store.put(b"data", label="x" * 10_000)
    assert ref.label == "x" * 64
    assert len(ref.ref) == 64 + 1 + 64 + 5
    assert ref.path.exists()


def test_label_must_be_a_string(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    with pytest.raises(TypeError, match="label"):
        store.put(b"x", label=b"bytes")  # type: ignore[arg-type]


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_property_sanitized_label_is_a_safe_name(label: str) -> None:
    clean = sanitize_label(label)
    assert 1 <= len(clean) <= 64
    assert set(clean) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")
    assert not clean.startswith("-")


@pytest.mark.parametrize(
    "ref",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "t." + "0" * 64 + ".json/../x",
        "t." + "0" * 64 + ".json\x00",
        "..",
        "",
        "T." + "0" * 64 + ".json",
        "t." + "0" * 63 + ".json",
        "t." + "0" * 64 + ".exe",
        42,
        "x" * 10_000,
    ],
)
def test_read_refuses_refs_that_are_not_store_names(tmp_path: Path, ref: object) -> None:
    store = SpillStore(tmp_path)
    with pytest.raises(SpillError, match="not a spill reference") as info:
        store.read(ref)  # type: ignore[arg-type]
    assert len(str(info.value)) < 200  # a hostile ref is not echoed whole


def test_read_pages_through_with_bounded_reads(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    data = bytes(range(256)) * 40
    ref = store.put(data, label="t")
    assert store.read(ref.ref, 0, 100) == data[:100]
    assert store.read(ref.ref, 10_000, 500) == data[10_000:10_240]
    assert store.read(ref.ref, len(data), 10) == b""
    assert store.read(ref.ref, len(data) + 50, 10) == b""
    assert store.read(ref.ref) == data  # default limit 64 KiB covers it
    pages = []
    offset = 0
    while chunk := store.read(ref.ref, offset, 999):
        assert len(chunk) <= 999
        pages.append(chunk)
        offset += len(chunk)
    assert b"".join(pages) == data
    with store.open(ref.ref) as fh:
        assert fh.read() == data


@pytest.mark.parametrize(("offset", "limit"), [(-1, 10), (0, 0), (0, 2**62), (0.5, 10), (0, None)])
def test_read_validates_offset_and_limit(tmp_path: Path, offset: object, limit: object) -> None:
    store = SpillStore(tmp_path)
    ref = store.put(b"abc", label="t")
    with pytest.raises(LimitError):
        store.read(ref.ref, offset, limit)  # type: ignore[arg-type]


def test_read_of_a_missing_ref_says_so(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    ref = store.put(b"abc", label="t")
    ref.path.unlink()
    with pytest.raises(SpillError, match="expired, evicted or never stored"):
        store.read(ref.ref)


def test_read_refuses_a_symlink_planted_under_a_valid_name(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "s")
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not read")
    name = "t." + "a" * 64 + ".json"
    (store.directory / name).symlink_to(secret)
    with pytest.raises(SpillError):
        store.read(name)


def test_regression_a_fifo_planted_under_a_valid_name_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    # Opening a FIFO for reading waited for a writer: read, get and open hung forever.
    store = SpillStore(tmp_path / "s")
    name = "t." + "b" * 64 + ".json"
    os.mkfifo(store.directory / name)
    code = (
        "import sys\n"
        "from jsonbudget import SpillStore, SpillError\n"
        f"store = SpillStore({str(tmp_path / 's')!r})\n"
        "for call in (lambda: store.read(sys.argv[1]), lambda: store.get(sys.argv[1])):\n"
        "    try:\n"
        "        call()\n"
        "    except SpillError as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, name], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("is not a regular file") == 2


def test_get_rebuilds_the_reference(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    ref = store.put(b"hello", label="t", media_type="text/plain")
    assert store.get(ref.ref) == SpillRef(ref.ref, 5, ref.sha256, "text/plain", "t", ref.path)


def test_bad_media_type_is_refused(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    with pytest.raises(LimitError, match="media_type"):
        store.put(b"x", label="t", media_type="../../x")
    assert visible_files(tmp_path) == []


def test_cleanup_by_age_and_total_size(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, max_age=3600, max_total_bytes=2500)
    old = store.put(b"o" * 100, label="old")
    now = time.time()
    os.utime(old.path, (now - 7200, now - 7200))
    stale_tmp = tmp_path / ".tmp-abandoned.part"
    stale_tmp.write_bytes(b"partial")
    os.utime(stale_tmp, (now - 7200, now - 7200))
    stranger = tmp_path / "not-ours.txt"
    stranger.write_bytes(b"keep me")
    os.utime(stranger, (now - 7200, now - 7200))
    refs = []
    for i in range(3):
        ref = store.put(bytes([65 + i]) * 1000, label=f"r{i}")
        os.utime(ref.path, (now - 100 + i, now - 100 + i))
        refs.append(ref)
    # The third put pushed the total to 3000 > 2500: the oldest went, the rest stayed.
    assert not old.path.exists()
    assert stranger.exists()
    assert not refs[0].path.exists()
    assert refs[1].path.exists()
    assert refs[2].path.exists()
    # A put between scans trims the results its process knows; the abandoned temporary
    # file (another process's) is found by a scan, which cleanup() is.
    report = store.cleanup()
    assert not stale_tmp.exists()
    assert stranger.exists()
    assert report.kept_files == 2
    assert report.kept_bytes == 2000
    assert (report.removed_files, report.removed_bytes) == (1, len(b"partial"))


def test_cleanup_never_evicts_the_file_just_written(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, max_total_bytes=1000)
    ref = store.put(b"z" * 1000, label="big")
    newer = store.put(b"q" * 600, label="newer")
    assert newer.path.exists()
    assert not ref.path.exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_age": 0},
        {"max_total_bytes": -1},
        {"max_total_bytes": 2**62},
        {"max_total_bytes": 100, "max_file_bytes": 101},
        {"max_age": 1.5},
    ],
)
def test_store_limits_validated_before_creating_anything(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    with pytest.raises(LimitError):
        SpillStore(tmp_path / "never", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "never").exists()


def store_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("with_reader", [False, True])
def test_regression_concurrent_puts_evicted_each_others_results_before_the_preview(
    tmp_path: Path, with_reader: bool
) -> None:
    # The store holds one result; every gate's own preview and reference must still work.
    store = SpillStore(tmp_path, max_total_bytes=300_000, max_file_bytes=200_000)
    if with_reader:
        gate = ResultGate(max_bytes=4096, reader=ResultReader(spill=store))
    else:
        gate = ResultGate(max_bytes=4096, store=store)
    errors: list[BaseException] = []
    spilled: list[int] = []

    def work(t: int) -> None:
        for i in range(40):
            rows = [{"t": t, "i": i, "body": "x" * 100}] * 1500  # about 195 KB
            # Bytes are previewed by reading the spilled file back; a reader's reference
            # checks that the file exists. Either fails if the file is evicted first.
            result_in = rows if with_reader else orjson.dumps(rows)
            try:
                result = gate.gate(result_in, label=f"w{t}")
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
            else:
                spilled.append(result.size)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(spilled) == 160
    # The writers have ended, so nothing is held: the limit applies again in full.
    store.cleanup()
    assert store_bytes(tmp_path) <= 300_000


def test_regression_a_threads_result_outlives_other_threads_puts_until_it_puts_again(
    tmp_path: Path,
) -> None:
    store = SpillStore(tmp_path, max_total_bytes=1000)
    written = threading.Event()
    go_on = threading.Event()
    refs: list[SpillRef] = []

    def writer() -> None:
        refs.append(store.put(b"a" * 900, label="first"))
        written.set()
        go_on.wait(10)
        refs.append(store.put(b"b" * 900, label="second"))

    thread = threading.Thread(target=writer)
    thread.start()
    assert written.wait(10)
    for i in range(5):
        store.put(bytes([65 + i]) * 900, label=f"other{i}")
        # Held for the writer, which has not put again: still there, still readable.
        assert store.read(refs[0].ref, 0, 3) == b"aaa"
    # Held: the writer's result and this thread's latest, each within max_file_bytes.
    assert store_bytes(tmp_path) == 1800
    go_on.set()
    thread.join()
    assert not refs[0].path.exists()  # released by the writer's next put, then evicted
    store.put(b"z" * 900, label="last")
    # The writer has ended: its second result is released and evicted too.
    assert not refs[1].path.exists()
    assert store_bytes(tmp_path) <= 1000


def test_eviction_still_bounds_the_store_while_threads_write(tmp_path: Path) -> None:
    # Four held results (one per thread, 2,000 bytes at most each) fit within the limit,
    # so every cleanup must bring what it counted within it.
    store = SpillStore(tmp_path, max_total_bytes=10_000, max_file_bytes=2_000)
    sizes: list[int] = []

    def work(t: int) -> None:
        for i in range(50):
            store.put(f"{t}-{i:02}".encode() * 400, label=f"w{t}")
            sizes.append(store.cleanup().kept_bytes)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sizes) == 200
    assert max(sizes) <= 10_000
    report = store.cleanup()
    assert report.kept_bytes <= 10_000
    assert store_bytes(tmp_path) == report.kept_bytes


def test_regression_a_paused_writers_temp_file_was_removed_as_abandoned(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, max_age=1)
    paused = threading.Event()
    resume = threading.Event()

    def slow() -> Iterator[bytes]:
        yield b"x" * 10
        paused.set()
        resume.wait(10)
        yield b"y" * 10

    refs: list[SpillRef] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            refs.append(store.put(slow(), label="slow"))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    assert paused.wait(10)
    (live,) = tmp_path.glob(".tmp-*.part")
    abandoned = tmp_path / ".tmp-abandoned.part"
    abandoned.write_bytes(b"partial")
    long_ago = time.time() - 100  # both last modified far longer than max_age ago
    os.utime(live, (long_ago, long_ago))
    os.utime(abandoned, (long_ago, long_ago))
    store.put(b"z", label="other")
    assert live.exists()
    assert not abandoned.exists()
    resume.set()
    thread.join()
    assert errors == []
    assert store.read(refs[0].ref) == b"x" * 10 + b"y" * 10


def test_regression_cleanup_that_cannot_remove_a_file_raises_spill_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a tester: a read-only directory (mode 0500) made cleanup() raise a bare
    # PermissionError. The refusal is injected here: root, who runs CI, may remove files
    # from a read-only directory.
    store = SpillStore(tmp_path / "spill", max_age=60)
    ref = store.put(b"x", label="t")
    store.put(b"y", label="t")  # this thread's latest, which cleanup keeps
    old = time.time() - 3600
    os.utime(ref.path, (old, old))  # past max_age: cleanup removes it

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(SpillError, match="cannot remove") as info:
        store.cleanup()
    assert isinstance(info.value.__cause__, PermissionError)
    assert ref.path.exists()


def test_regression_cleanup_of_a_deleted_directory_raised_file_not_found(
    tmp_path: Path,
) -> None:
    store = SpillStore(tmp_path / "spill")
    store.put(b"x", label="t")
    shutil.rmtree(tmp_path / "spill")
    with pytest.raises(SpillError, match="cannot list the spill directory"):
        store.cleanup()
    with pytest.raises(SpillError, match="cannot create a spill file"):
        store.put(b"x", label="t")


# -- the cost of a put's retention (tester's report r16, F4) ------------------------------


def count_directory_work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the directory listings, the entries they visit and the `os.stat` calls."""
    from typing import Any

    counts = {"scans": 0, "entries": 0, "stats": 0}
    real_scandir, real_stat = os.scandir, os.stat

    class Counted:
        def __init__(self, entries: Any) -> None:
            self._entries = entries

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc_info: object) -> None:
            self._entries.close()

        def __iter__(self) -> Counted:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry: os.DirEntry[str] = next(self._entries)
            counts["entries"] += 1
            return entry

    def scandir(path: Any) -> Counted:
        counts["scans"] += 1
        return Counted(real_scandir(path))

    def stat_(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        counts["stats"] += 1
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", stat_)
    return counts


def test_regression_each_put_listed_and_stat_ed_the_whole_spill_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a tester: put ran cleanup(), which listed and stat-ed every file in the
    # directory, so the 8,000th small spill cost 64 times the 100th and N spills O(N^2).
    counts = count_directory_work(monkeypatch)
    n = 250
    store = SpillStore(tmp_path / "kept")
    for i in range(n):
        store.put(f"{i:05}".encode() * 500, label="r")
    assert len(os.listdir(tmp_path / "kept")) == n  # nothing old, nothing over the limit
    assert counts["entries"] + counts["stats"] <= 3 * n  # was n * n / 2
    # A store that evicts at every put: one stat per file removed, no listing of them all.
    for key in counts:
        counts[key] = 0
    store = SpillStore(tmp_path / "evicting", max_total_bytes=10 * 2500)
    for i in range(n):
        store.put(f"{i:05}".encode() * 500, label="r")
    assert len(os.listdir(tmp_path / "evicting")) == 10
    assert counts["entries"] + counts["stats"] <= 3 * n  # was 11 * n


def test_regression_every_new_store_object_listed_the_whole_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gate_result without a store, and every TurnBudget, make a SpillStore of their own on
    # the default directory: the stores of a process share what it knows of a directory.
    from jsonbudget import gate_result

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = default_spill_dir()
    first = SpillStore()
    for i in range(150):
        first.put(f"{i:05}".encode() * 500, label="earlier")
    del first  # what the process knows of the directory outlives its last store object
    counts = count_directory_work(monkeypatch)
    for i in range(50):
        out = gate_result([{"call": i, "body": "x" * 100}] * 20, max_bytes=1024)
        assert out.spilled
    assert len(os.listdir(directory)) == 200
    assert counts["entries"] <= 250  # one scan at most; was 50 of 150 entries or more


def test_a_put_scans_after_as_many_puts_as_the_last_scan_visited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jsonbudget._agents.spill import _SCAN_MIN_PUTS

    limit = 100_000
    store = SpillStore(tmp_path, max_total_bytes=limit)
    store.put(b"first", label="first")  # the process's first put on a directory scans it
    counts = count_directory_work(monkeypatch)
    # Another process stores a result this process does not know of yet.
    other = tmp_path / f"other.{'0' * 64}.bin"
    other.write_bytes(b"o" * 150_000)
    for i in range(_SCAN_MIN_PUTS - 1):
        store.put(f"{i:04}".encode() * 250, label="mine")
        # Over the limit by no more than what others stored since the last scan.
        assert store_bytes(tmp_path) <= limit + 150_000
    assert counts["scans"] == 0
    assert other.exists()
    store.put(b"last" * 250, label="mine")  # the 64th put since the scan: a scan
    assert counts["scans"] == 1
    assert not other.exists()  # the results older than it went first, then it: alone, over
    assert store_bytes(tmp_path) <= limit


def test_results_another_process_stores_are_counted_from_the_next_scan(tmp_path: Path) -> None:
    directory = tmp_path / "spill"
    store = SpillStore(directory, max_total_bytes=10_000)
    mine = [store.put(bytes([65 + i]) * 1000, label=f"a{i}") for i in range(5)]
    code = (
        "import sys\n"
        "from jsonbudget import SpillStore\n"
        "store = SpillStore(sys.argv[1], max_total_bytes=10_000)\n"
        "for i in range(8):\n"
        "    store.put(bytes([97 + i]) * 1000, label=f'b{i}')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(directory)], check=True, timeout=120)
    # The other process scanned first, so it kept the directory within its limit: the
    # oldest of this process's results went.
    assert store_bytes(directory) == 10_000
    assert [ref.path.exists() for ref in mine] == [False, False, False, True, True]
    store.put(b"z" * 1000, label="mine")
    # This process does not know the other's results until its next scan: over the limit
    # by at most what the other stored since this process's last scan.
    assert 10_000 < store_bytes(directory) <= 10_000 + 8 * 1000
    report = store.cleanup()
    assert store_bytes(directory) == report.kept_bytes == 10_000
    assert not mine[3].path.exists()  # the oldest
    store.put(b"y" * 1000, label="mine")  # known now: trimmed at the put
    assert store_bytes(directory) == 10_000


def test_age_is_kept_between_scans_for_results_known_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clock moved by hand: the ages are real file times, only the wait is skipped.
    offset = [0]
    real_time_ns = time.time_ns

    def at(seconds: int) -> None:
        offset[0] = seconds * 1_000_000_000

    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + offset[0])
    counts = count_directory_work(monkeypatch)
    store = SpillStore(tmp_path, max_age=100)
    a = store.put(b"a", label="a")  # t=0: the first put scans
    at(10)
    planted = tmp_path / f"other.{'1' * 64}.json"  # stored by another process at t=10
    planted.write_bytes(b"{}")
    stamp = time.time_ns()
    os.utime(planted, ns=(stamp, stamp))
    at(40)
    b = store.put(b"b", label="b")  # no scan: the last began 40 s ago, under max_age / 2
    assert (counts["scans"], a.path.exists(), planted.exists()) == (1, True, True)
    at(101)
    c = store.put(b"c", label="c")  # the last scan began over max_age / 2 ago: a scan
    assert (counts["scans"], a.path.exists(), planted.exists()) == (2, False, True)
    at(112)
    store.put(b"d", label="d")  # the planted result, found by that scan, is 102 s old
    assert (counts["scans"], planted.exists(), b.path.exists()) == (2, False, True)
    at(141)
    store.put(b"e", label="e")  # this process's own result, 101 s old
    assert (counts["scans"], b.path.exists(), c.path.exists()) == (2, False, True)


def test_a_put_drops_results_removed_by_others_and_keeps_those_stored_again(
    tmp_path: Path,
) -> None:
    from jsonbudget import SpillCleanup

    store = SpillStore(tmp_path, max_total_bytes=3000)
    refs = [store.put(bytes([65 + i]) * 1000, label=f"r{i}") for i in range(3)]
    # Another process removes r0 and stores r1 again (same label and content: same name,
    # a new time), both after this process's last scan.
    refs[0].path.unlink()
    later = time.time_ns() + 1_000_000_000
    os.utime(refs[1].path, ns=(later, later))
    z = store.put(b"z" * 1000, label="z")  # r0's room is free: nothing else goes
    assert [ref.path.exists() for ref in refs] == [False, True, True]
    w = store.put(b"w" * 1000, label="w")  # the oldest is r2 now, not r1
    assert [ref.path.exists() for ref in refs] == [False, True, False]
    assert z.path.exists()
    assert w.path.exists()
    assert store_bytes(tmp_path) == 3000
    assert store.cleanup() == SpillCleanup(0, 0, 3, 3000)


def test_a_process_keeps_the_ledgers_of_the_directories_it_uses_not_of_all(
    tmp_path: Path,
) -> None:
    # A ledger lives while a store uses it, and the last 16 directories keep theirs:
    # making a private directory per session must not grow the process without end.
    from jsonbudget._agents.spill import _LEDGERS, _RECENT_LEDGERS

    kept = SpillStore(tmp_path / "kept")
    kept.put(b"k", label="k")
    for i in range(3 * _RECENT_LEDGERS):
        SpillStore(tmp_path / f"session{i}").put(b"s", label="s")
    known = {Path(key) for key in _LEDGERS.by_dir}
    assert kept.directory in known
    sessions = {tmp_path.resolve() / f"session{i}" for i in range(3 * _RECENT_LEDGERS)}
    assert len(known & sessions) <= _RECENT_LEDGERS


@pytest.mark.parametrize(
    ("item", "head", "tail"),
    [("TEXT", b'"', b'"'), ('{"id": 1, "log": TEXT}', b'{"id":1,"log":"', b'"}')],
)
def test_regression_an_oversized_item_holding_a_long_string_spills_under_an_address_limit(
    tmp_path: Path, item: str, head: bytes, tail: bytes
) -> None:
    """Found by a tester: ``paginate(..., oversized="spill")`` of an item that is (or
    holds) a 60 MB string handed the string to orjson in one call, which reserves 9-16
    bytes of address space a character: under a 600 MiB address-space limit the
    process died with SIGSEGV. The spill writer escapes it a piece at a time."""
    done = run_limited(
        f"""
        import hashlib, os
        from jsonbudget import Limits, MemoryCursorStore, Scope, SpillStore, paginate

        N = 60_000_000
        TEXT = "x" * N
        items = [{item}]
        page = paginate(
            items, scope=Scope("u", {{}}), store=MemoryCursorStore(), limits=Limits(4096),
            oversized="spill", spill_store=SpillStore({str(tmp_path)!r}),
        )
        del items, TEXT
        [name] = [n for n in os.listdir({str(tmp_path)!r}) if n.endswith(".json")]
        digest = hashlib.sha256({head!r})
        for _ in range(60):
            digest.update(b"x" * 1_000_000)
        digest.update({tail!r})
        with open(os.path.join({str(tmp_path)!r}, name), "rb") as f:
            got = hashlib.sha256()
            while block := f.read(1 << 20):
                got.update(block)
        assert got.hexdigest() == digest.hexdigest()
        assert page.oversized[0].outcome == "spilled"
        print("ok")
        """,
        memory=600 << 20,
        timeout=180,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"
