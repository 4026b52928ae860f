"""mypy (strict) and ruff over the package: part of the suite so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_clean_over_the_whole_package() -> None:
    result = subprocess.run([sys.executable, "scripts/typecheck.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert "Success" in result.stdout


@pytest.mark.skipif(shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0, reason="ruff is not installed (pip install -e '.[dev]')")
def test_ruff_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "client", "broker_min", "spark", "tests", "examples", "benchmarks", "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-5000:]
