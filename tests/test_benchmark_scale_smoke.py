"""A short run of benchmarks/scale.py: curves for two partition counts and layouts, the plots, and broker_min start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_scale_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/scale.py", "--smoke", "--json", str(out), "--plots", str(tmp_path / "img")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    points = data["points"]
    assert {(p["partitions"], p["layout"]) for p in points} == {
        (1, "one-topic"),
        (100, "one-topic"),
        (100, "100-topics"),
    }
    assert all(p["seconds"] > 0 and p["cpu"] > 0 for p in points)
    assert {p["client"] for p in points} == {"kafkakit", "confluent"}
    startup = data["startup"]
    assert startup["partitions"] == 200 and startup["records"] > 0
    assert (
        startup["clean_start_s"] > 0
        and startup["recovery_start_s"] > 0
        and startup["rss_after_recovery_mb"] > 0
    )
    assert (tmp_path / "img" / "scale-throughput.png").stat().st_size > 1000
    assert (tmp_path / "img" / "scale-cpu.png").stat().st_size > 1000
    assert all(p["create_s"] > 0 and p["records"] == 5000 for p in points)


def test_scale_benchmark_redraws_from_earlier_runs(tmp_path: Path) -> None:
    """--merge with --brokers '' measures nothing: a later file's cell replaces an earlier file's."""

    def point(broker: str, partitions: int, client: str, role: str, seconds: float) -> dict[str, object]:
        return {"broker": broker, "partitions": partitions, "layout": "one-topic", "client": client,
                "role": role, "seconds": seconds, "cpu": seconds / 2}  # fmt: skip

    def cell(broker: str, partitions: int, seconds: float) -> list[dict[str, object]]:
        return [
            point(broker, partitions, c, r, seconds)
            for c in ("kafkakit", "confluent")
            for r in ("produce", "consume")
        ]

    old, new, merged = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "merged.json"
    old.write_text(
        json.dumps({"args": {"records": 1000}, "points": cell("kafka", 1000, 1.0) + cell("kafka", 10, 1.0)})
    )
    new.write_text(json.dumps({"args": {"records": 2000}, "points": cell("kafka", 1000, 4.0)}))
    result = subprocess.run(
        [sys.executable, "benchmarks/scale.py", "--brokers", "", "--merge", str(old), "--merge", str(new),
         "--json", str(merged), "--plots", str(tmp_path / "img")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    points = json.loads(merged.read_text())["points"]
    assert (
        sorted((p["partitions"], p["records"], p["seconds"]) for p in points)
        == [(10, 1000, 1.0)] * 4 + [(1000, 2000, 4.0)] * 4
    )
    assert "| kafka | one-topic | produce | 1,000 | 500 | 500 | 1.00x | 1000.00 | 1000.00 |" in result.stdout
    assert (tmp_path / "img" / "scale-throughput.png").stat().st_size > 1000
