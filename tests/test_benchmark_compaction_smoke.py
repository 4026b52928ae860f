"""A short run of the compaction benchmark (broker_min only): well-formed output, positive figures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_compaction_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "section.md"
    result = subprocess.run(
        [sys.executable, "benchmarks/compaction.py", "--smoke", "--markdown", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    match = re.search(r"round 1 broker_min: ([\d.]+) MB cleaned in ([\d.]+) s = ([\d.]+) MB/s", result.stdout)
    assert match is not None, result.stdout
    mb, secs, rate = (float(g) for g in match.groups())
    assert mb > 1.0 and secs > 0 and rate > 0
    section = out.read_text()
    assert section.startswith("## Log compaction throughput")
    assert "Command: `python benchmarks/compaction.py --smoke`" in section
    assert re.search(r"^\| 1 \| [\d.]+ \| [\d.]+ \|$", section, re.M), section
