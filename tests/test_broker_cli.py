"""Broker settings validation and the ``python -m kafkakit.broker`` command line."""

from __future__ import annotations

import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafkakit.broker import Broker, BrokerConfig
from kafkakit.broker.cli import parse_settings
from kafkakit.broker.handlers.base import nested
from kafkakit.errors import KafkaConfigError
from kafkakit.protocol import decode_response, encode_request, request_class


def test_config_accepts_snake_and_dotted_names() -> None:
    config = BrokerConfig.from_kwargs(num_partitions=3, **{"log.segment.bytes": 1 << 20})
    assert (config.num_partitions, config.log_segment_bytes) == (3, 1 << 20)
    assert config.overridden() == {"num_partitions", "log_segment_bytes"}


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"no_such_thing": 1}, "no_such_thing"),
        ({"num_partitions": 0}, "num_partitions"),
        ({"num_partitions": "3"}, "num_partitions"),
        ({"auto_create_topics_enable": 1}, "auto_create_topics_enable"),
        ({"default_replication_factor": 3}, "default_replication_factor"),
        ({"log_retention_ms": -2}, "log_retention_ms"),
    ],
)
def test_bad_settings_raise_config_error_naming_the_setting(
    settings: dict[str, object], setting: str
) -> None:
    with pytest.raises(KafkaConfigError) as info:
        Broker("/nonexistent-never-created", **settings)
    assert info.value.setting == setting


def test_cli_settings_parse_from_strings() -> None:
    settings = parse_settings(
        ["num.partitions=4", "auto.create.topics.enable=false", "log_retention_ms=60000"]
    )
    assert settings == {"num_partitions": 4, "auto_create_topics_enable": False, "log_retention_ms": 60000}
    with pytest.raises(KafkaConfigError):
        parse_settings(["num.partitions=many"])
    with pytest.raises(KafkaConfigError):
        parse_settings(["novalue"])


async def test_cluster_id_mismatch_is_refused(tmp_path: Path) -> None:
    async with Broker(tmp_path, cluster_id="first-cluster") as broker:
        assert broker.state.cluster_id == "first-cluster"
    with pytest.raises(KafkaConfigError):
        async with Broker(tmp_path, cluster_id="other-cluster"):
            pass
    async with Broker(tmp_path) as broker:
        assert broker.state.cluster_id == "first-cluster"


def test_module_entry_point_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafkakit.broker",
            "--data-dir",
            str(tmp_path),
            "--port",
            "0",
            "--config",
            "num.partitions=2",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"kafkakit broker listening on 127\.0\.0\.1:(\d+) \(data dir (.+)\)", line)
        assert match, line
        port = int(match.group(1))
        topic_cls = nested(request_class(3, 1), "MetadataRequestTopic")
        payload = request_class(3, 1)(topics=(topic_cls(name="cli-topic"),))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(encode_request(1, "cli-test", payload))
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            _, resp = decode_response(3, 1, sock.recv(size, socket.MSG_WAITALL))
        assert resp.brokers[0].port == port
        assert [(t.name, len(t.partitions)) for t in resp.topics] == [("cli-topic", 2)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "meta.properties").exists()
    # Stopped cleanly: each partition log left Kafka's clean-shutdown marker, so no recovery next start.
    assert (tmp_path / "cli-topic-0" / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "cli-topic-1" / ".kafka_cleanshutdown").exists()


def test_cli_rejects_bad_setting(tmp_path: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kafkakit.broker", "--data-dir", str(tmp_path), "--config", "bogus.key=1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "bogus.key" in result.stderr
    assert time.monotonic() - started < 30
