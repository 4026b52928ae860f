"""The test brokers themselves: each kind starts, answers real Kafka requests, and stops.

If these fail, every other broker test fails for the same reason; read these first.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.brokers import (
    BrokerMinProcess,
    BrokerSetupError,
    KafkaServer,
    RunningBroker,
    api_versions,
    missing_kafka_tools,
    new_topic_name,
    requested_broker_kinds,
    split_address,
)

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


def test_api_versions_lists_produce_and_fetch(broker: RunningBroker) -> None:
    versions = api_versions(broker.bootstrap_servers)
    for key in (PRODUCE, FETCH, METADATA, API_VERSIONS):
        assert key in versions, f"{broker.kind} does not advertise api key {key}"
    assert all(0 <= low <= high for low, high in versions.values()), versions
    # Versions every modern client relies on (see the shared protocol notes).
    assert versions[API_VERSIONS][1] >= 3
    assert versions[PRODUCE][1] >= 9
    assert versions[FETCH][0] <= 4 <= versions[FETCH][1]


def test_confluent_admin_client_sees_the_broker(broker: RunningBroker) -> None:
    host, port = split_address(broker.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    metadata = admin.list_topics(timeout=20)
    advertised: set[tuple[object, int]] = {(b.host, b.port) for b in metadata.brokers.values()}
    assert (host, port) in advertised, f"{broker.kind} advertises {advertised}"


def test_broker_kind_is_named(broker: RunningBroker) -> None:
    assert broker.kind in {"broker_min", "kafka", "testcontainers"}
    if broker.kind == "broker_min":
        assert Path(broker.data_dir).is_dir()  # type: ignore[attr-defined]


def test_broker_min_process_answers_again_after_sigkill_and_restart(
    broker_min_process: BrokerMinProcess,
) -> None:
    first_pid = broker_min_process.pid
    broker_min_process.kill()
    assert not broker_min_process.is_running()
    with pytest.raises(OSError):
        socket.create_connection(split_address(broker_min_process.bootstrap_servers), timeout=2).close()
    broker_min_process.restart()
    assert broker_min_process.pid != first_pid
    assert PRODUCE in api_versions(broker_min_process.bootstrap_servers)
    assert broker_min_process.starts == 2


# ------------------------------------------------------------------ the plumbing, without a broker


def test_requested_broker_kinds_defaults_to_broker_min_and_kafka() -> None:
    assert requested_broker_kinds(None) == ["broker_min", "kafka"]
    assert requested_broker_kinds(" kafka , broker_min,kafka ") == ["kafka", "broker_min"]
    assert requested_broker_kinds("testcontainers") == ["testcontainers"]


@pytest.mark.parametrize("setting", ["", " , ", "kafak", "broker_min,zookeeper"])
def test_requested_broker_kinds_rejects_typos_and_empty_lists(setting: str) -> None:
    with pytest.raises(ValueError, match="KAFKAKIT_TEST_BROKERS"):
        requested_broker_kinds(setting)


def test_new_topic_names_are_unique_and_legal() -> None:
    names = {new_topic_name("smoke") for _ in range(1000)}
    assert len(names) == 1000
    assert all(re.fullmatch(r"smoke-[0-9a-f]{12}", n) for n in names)


def test_topic_fixture_names_the_test(topic: str) -> None:
    assert re.fullmatch(r"[a-zA-Z0-9._-]+", topic)
    assert topic.startswith("test_topic_fixture_names_the_test-")


def test_split_address_rejects_garbage() -> None:
    assert split_address("127.0.0.1:9092,other:1") == ("127.0.0.1", 9092)
    with pytest.raises(ValueError):
        split_address("localhost")


def test_kafka_skip_reason_names_the_missing_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = missing_kafka_tools()
    assert reason is not None
    assert "need java and mvn" in reason and "KAFKAKIT_TEST_BROKERS=broker_min" in reason
    assert "missing: java, mvn" in reason


@pytest.mark.skipif(shutil.which("java") is None, reason="needs java to show a failed Kafka start")
def test_kafka_that_cannot_start_is_an_error_not_a_skip(tmp_path: Path) -> None:
    empty_lib = tmp_path / "lib"
    empty_lib.mkdir()
    server = KafkaServer(tmp_path / "work", lib_dir=empty_lib)
    with pytest.raises(BrokerSetupError, match="format failed"):
        server.start()
