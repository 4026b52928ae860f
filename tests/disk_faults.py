"""A full disk, for real: a small tmpfs filled up, or a file size limit (RLIMIT_FSIZE).

A tmpfs mounted on a directory and filled with a filler file answers every write that needs
a new page with ENOSPC, as a full disk does; deleting the filler gives the space back.  It
needs mount privileges (root with CAP_SYS_ADMIN); :func:`tmpfs_available` says whether this
machine has them.  Without them a file size limit stands in: with RLIMIT_FSIZE lowered (on
this process, or on a child by ``prlimit``) a write past the limit is cut short and the next
fails with EFBIG (Python ignores SIGXFSZ, so the process is not killed): the same partial
write and error a full disk gives, for the files that grow past the limit.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

FILLER = "disk-filler"


@functools.cache
def tmpfs_available() -> bool:
    """Whether a tmpfs can be mounted here (root in a VM: yes; an unprivileged container: no)."""
    if os.geteuid() != 0 or os.environ.get("KAFKAKIT_NO_TMPFS"):
        return False
    with tempfile.TemporaryDirectory(prefix="kafkakit-tmpfs-probe-") as probe:
        try:
            mount_tmpfs(Path(probe), "64k")
        except (OSError, subprocess.CalledProcessError):
            return False
        unmount(Path(probe))
    return True


def mount_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` (e.g. ``"1m"``) on ``path`` (created if needed)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=True, capture_output=True, timeout=10,
    )  # fmt: skip


def unmount(path: Path) -> None:
    """Unmount ``path`` (lazily: a process that still holds a file there keeps it until it exits)."""
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=10)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    mount_tmpfs(path, size)
    try:
        yield path
    finally:
        unmount(path)


def fill(directory: Path) -> Path:
    """Write a filler file into ``directory`` until its filesystem is full; returns its path.

    Files already there keep the unused rest of their last page: a write that fits in it
    still succeeds, anything needing a new page fails with ENOSPC.
    """
    path = directory / FILLER
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1):
            block = b"\0" * chunk
            while True:
                try:
                    if os.write(fd, block) < chunk:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


def free(directory: Path) -> None:
    """Give the space taken by :func:`fill` back."""
    (directory / FILLER).unlink(missing_ok=True)


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Lower this process's RLIMIT_FSIZE soft limit to ``limit`` bytes for the block.

    Keep the block short: every regular file this process writes is limited meanwhile.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def limit_file_size(pid: int, limit: int | None) -> None:
    """Set another process's RLIMIT_FSIZE soft limit (``None``: back to its hard limit)."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard if limit is None else limit, hard))
