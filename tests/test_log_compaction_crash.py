"""Crash safety of the cleaner's segment swap: a process killed at each step of
.cleaned -> .swap -> live reopens to a consistent log (kafkakit.broker.log.swap)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafkakit.broker.log import LogConfig, LogManager, PartitionLog
from kafkakit.broker.log.swap import FAILPOINT_ENV
from kafkakit.records import decode_batch, encode_batch

NOW = int(time.time() * 1000)
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1500", "min.cleanable.dirty.ratio": "0.01"}
_CHILD = """
import sys
from pathlib import Path
from kafkakit.broker.log import LogConfig, LogManager
from kafkakit.broker.log.cleaner_task import LogCleaner
manager = LogManager(Path(sys.argv[1]), LogConfig())
log = manager.get("t", 0)
LogCleaner(manager).clean_log_now(log)
manager.close()
"""


def _write(data_dir: Path) -> dict[bytes, bytes]:
    manager = LogManager(data_dir, LogConfig())
    log = manager.create("t", 0, LogConfig.from_topic_configs(CONFIG))
    latest: dict[bytes, bytes] = {}
    for i in range(150):
        key, value = f"k{i % 9}".encode(), f"value-{i}".encode()
        log.append(encode_batch([(key, value, NOW, ())]))
        latest[key] = value
    manager.close()
    return latest


def _read(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for header, data in log.iter_batches():
        for record in decode_batch(data.read_bytes(), 0, header, "t", 0):
            out.append((record.offset, record.key, record.value))
    return out


def _check_consistent(data_dir: Path, latest: dict[bytes, bytes]) -> None:
    manager = LogManager(data_dir, LogConfig())
    log = manager.get("t", 0)
    assert log is not None and not manager.offline_dirs
    records = _read(log)
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets))  # increasing, no duplicates
    assert {k: v for _, k, v in records if k is not None} == latest  # nothing lost
    assert all(v == f"value-{o}".encode() for o, _, v in records)  # each record at its own offset
    assert log.log_end_offset == 150
    leftovers = [p.name for p in log.directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    # The log still works: it appends, and a new pass cleans it fully.
    log.append(encode_batch([(b"k0", b"value-150", NOW, ())]))
    log.roll()
    from kafkakit.broker.log.cleaner_task import LogCleaner

    LogCleaner(manager).clean_log_now(log, force=True)
    again = _read(log)
    below = [r for r in again if r[0] < 150]
    assert len({k for _, k, _ in below}) == len(below)  # one record per key left
    manager.close()


@pytest.mark.parametrize("failpoint", ["after_cleaned_written", "after_swap_rename", "after_delete_old"])
def test_killed_during_clean_recovers(tmp_path: Path, failpoint: str) -> None:
    data_dir = tmp_path / "data"
    latest = _write(data_dir)
    env = {**os.environ, FAILPOINT_ENV: failpoint}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_dir)], env=env, timeout=60, capture_output=True
    )
    assert child.returncode == 17, child.stderr.decode()[-2000:]
    names = [p.name for p in (data_dir / "t-0").iterdir()]
    expected_suffix = ".cleaned" if failpoint == "after_cleaned_written" else ".swap"
    assert any(n.endswith(expected_suffix) for n in names)  # the crash left that state behind
    _check_consistent(data_dir, latest)


def test_crash_after_index_renamed_before_log_renamed(tmp_path: Path) -> None:
    """The last window of a swap: index files already live, the .log still .swap."""
    data_dir = tmp_path / "data"
    latest = _write(data_dir)
    env = {**os.environ, FAILPOINT_ENV: "after_delete_old"}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_dir)], env=env, timeout=60, capture_output=True
    )
    assert child.returncode == 17, child.stderr.decode()[-2000:]
    directory = data_dir / "t-0"
    swaps = [
        p for p in directory.iterdir() if p.name.endswith(".index.swap") or p.name.endswith(".timeindex.swap")
    ]
    assert swaps
    for path in swaps:
        path.rename(path.with_name(path.name.removesuffix(".swap")))
    _check_consistent(data_dir, latest)


def test_killed_without_failpoint_completes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    latest = _write(data_dir)
    child = subprocess.run([sys.executable, "-c", _CHILD, str(data_dir)], timeout=60, capture_output=True)
    assert child.returncode == 0, child.stderr.decode()[-2000:]
    _check_consistent(data_dir, latest)
    assert (data_dir / "cleaner-offset-checkpoint").read_text().splitlines()[:2] == ["0", "1"]
