"""``kafkakit-broker cluster``: a local KRaft cluster from the command line (issue 13)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def test_kafkakit_broker_cluster_prints_bootstrap_servers_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkakit.broker", "cluster", "--nodes", "3", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        servers = line.split(",")
        assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers), line
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # Each node ran in its own data dir and stopped cleanly (its log says so).
    for node_id in (1, 2, 3):
        log = (tmp_path / f"node-{node_id}.log").read_text()
        assert "kafkakit broker stopping" in log and "Traceback" not in log, log[-2000:]


def test_a_bad_setting_is_refused_before_any_node_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kafkakit.broker", "cluster", "--data-dir", str(tmp_path), "--config", "min.insync.replicas=0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "min_insync_replicas" in result.stderr
    assert not list(tmp_path.glob("node-*"))

