"""Run mypy (strict, per pyproject.toml) over the whole kafkakit package.

The repository maps three folders onto one namespace (client/ -> kafkakit,
broker_min/ -> kafkakit.broker, spark/ -> kafkakit.spark), a layout mypy
cannot follow by itself: run against the folders directly, every cross-module
import would resolve to Any.  This script lays out a throw-away tree of
symlinks shaped like the installed package and type-checks that.

    python scripts/typecheck.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_tree(target: Path) -> Path:
    package = target / "kafkakit"
    package.mkdir()
    for entry in (ROOT / "client").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "broker").symlink_to(ROOT / "broker_min")
    (package / "spark").symlink_to(ROOT / "spark")
    return package


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kafkakit-mypy-") as tmp:
        build_tree(Path(tmp))
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "kafkakit"]
        return subprocess.call(cmd, cwd=tmp, env={**__import__("os").environ, "MYPYPATH": tmp})


if __name__ == "__main__":
    raise SystemExit(main())
