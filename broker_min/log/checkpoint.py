"""Small per-partition state files: the clean-shutdown marker and offset checkpoints.

Kafka keeps these once per data directory; here each partition directory is
self-contained so that :class:`PartitionLog` can be opened on its own.  The
checkpoint files use Kafka's text format (version, count, "topic partition offset").
"""

from __future__ import annotations

import os
from pathlib import Path

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
#: Per data directory, as in Kafka: each partition's high watermark at the last clean shutdown.
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
TOPIC_CONFIG_FILE = "topic-config.properties"
TMP_SUFFIX = ".tmp"
_VERSION = 0


def write_atomically(
    path: Path, data: str | bytes, *, fsync: bool = False, tmp_suffix: str = TMP_SUFFIX
) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never half."""
    tmp = path.with_name(path.name + tmp_suffix)
    with open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def write_durably(path: Path, data: str | bytes, *, tmp_suffix: str = TMP_SUFFIX) -> None:
    """:func:`write_atomically` that also survives a power cut once it returns (file and directory fsynced)."""
    write_atomically(path, data, fsync=True, tmp_suffix=tmp_suffix)
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (which makes renames and unlinks in it durable), by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offset_checkpoint(
    path: Path, topic: str, partition: int, offset: int, *, fsync: bool = False
) -> None:
    write_atomically(path, f"{_VERSION}\n1\n{topic} {partition} {offset}\n", fsync=fsync)


def read_offset_checkpoint(path: Path, topic: str, partition: int) -> int | None:
    """The offset stored for (topic, partition), or None if the file is missing or unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    if len(lines) < 2 or lines[0].strip() != str(_VERSION):
        return None
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == str(partition):
            try:
                return int(parts[2])
            except ValueError:
                return None
    return None


def write_offsets_checkpoint(path: Path, offsets: dict[tuple[str, int], int], *, fsync: bool = False) -> None:
    """A data directory's checkpoint of many partitions (e.g. ``replication-offset-checkpoint``)."""
    lines = "".join(
        f"{topic} {partition} {offset}\n" for (topic, partition), offset in sorted(offsets.items())
    )
    write_atomically(path, f"{_VERSION}\n{len(offsets)}\n{lines}", fsync=fsync)


def read_offsets_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Every ``topic partition offset`` line of a data directory's checkpoint; {} if missing or unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return {}
    if len(lines) < 2 or lines[0].strip() != str(_VERSION):
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                continue
    return out


def write_properties(path: Path, values: dict[str, str]) -> None:
    """Java-properties style ``key=value`` lines (values are config strings without newlines)."""
    write_atomically(path, "".join(f"{key}={value}\n" for key, value in sorted(values.items())))


def read_properties(path: Path) -> dict[str, str]:
    """The ``key=value`` lines of ``path``; an empty dict if it is missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values
