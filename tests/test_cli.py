"""The ``kafkakit`` command as a real process against broker_min and Apache Kafka: topics, produce, consume, cluster, perf."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafkakit.cli.config import AUTO_CREATE_WAIT_S, client_settings, read_command_config, read_properties_text

from tests.brokers import BrokerMinServer, RunningBroker
from tests.cli_helpers import kafkakit, kafkakit_many, ok


def _create(broker: RunningBroker, topic: str, partitions: int = 1, *extra: str) -> None:
    out = ok(
        kafkakit(
            "topics", "create", "--bootstrap-server", broker.bootstrap_servers, "--topic", topic,
            "--partitions", str(partitions), "--replication-factor", "1", *extra,
        )
    )  # fmt: skip
    assert out.strip() == f"Created topic {topic}."


def test_topics_lifecycle(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    _create(broker, topic, 3, "--config", "retention.ms=3600000")
    assert topic in ok(kafkakit("topics", "list", "--bootstrap-server", bs)).split()
    assert topic in json.loads(ok(kafkakit("topics", "list", "--bootstrap-server", bs, "--output", "json")))

    text = ok(kafkakit("topics", "describe", "--bootstrap-server", bs, "--topic", topic))
    assert f"Topic: {topic}" in text and "PartitionCount: 3" in text and "ReplicationFactor: 1" in text
    assert "retention.ms=3600000" in text
    rows = [line.split() for line in text.splitlines()[2:] if line.strip()]
    assert [r[0] for r in rows] == ["0", "1", "2"]  # PARTITION LEADER REPLICAS ISR
    assert all(r[1] == r[2] == r[3] for r in rows)

    ok(kafkakit(
        "topics", "alter-config", "--bootstrap-server", bs, "--topic", topic,
        "--add-config", "retention.ms=60000,cleanup.policy=[delete]", "--delete-config", "nothing.set.here",
    ))  # fmt: skip
    described = json.loads(
        ok(kafkakit("topics", "describe", "--bootstrap-server", bs, "--topic", topic, "--output", "json"))
    )
    assert described[0]["overrides"]["retention.ms"] == "60000"
    assert described[0]["configs"]["retention.ms"] == "60000"
    assert [p["partition"] for p in described[0]["partitions"]] == [0, 1, 2]
    ok(
        kafkakit(
            "topics",
            "alter-config",
            "--bootstrap-server",
            bs,
            "--topic",
            topic,
            "--delete-config",
            "retention.ms",
        )
    )
    described = json.loads(
        ok(kafkakit("topics", "describe", "--bootstrap-server", bs, "--topic", topic, "--output", "json"))
    )
    assert "retention.ms" not in described[0]["overrides"]

    bad = kafkakit(
        "topics",
        "alter-config",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--add-config",
        "retention.ms=abc",
    )
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr

    again = kafkakit("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--partitions", "1")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    ok(kafkakit("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--if-not-exists"))

    assert (
        ok(kafkakit("topics", "delete", "--bootstrap-server", bs, "--topic", topic)).strip()
        == f"Deleted topic {topic}."
    )
    assert topic not in ok(kafkakit("topics", "list", "--bootstrap-server", bs)).split()


def test_unknown_topic_is_a_kafka_error(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    runs = [
        ("topics", "describe", "--topic", topic),
        ("consume", "--topic", topic, "--from-beginning", "--max-messages", "1"),
        ("topics", "delete", "--topic", topic),
    ]
    for args, result in zip(
        runs, kafkakit_many([(*a, "--bootstrap-server", bs) for a in runs], input="x\n"), strict=True
    ):
        assert result.returncode == 1, (args, result.stderr)
        assert "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr


def test_produce_auto_creates_a_missing_topic(broker: RunningBroker, topic: str) -> None:
    """Like kafka-console-producer: a broker that auto-creates topics gets the topic created."""
    bs = broker.bootstrap_servers
    ok(kafkakit("produce", "--bootstrap-server", bs, "--topic", topic, input="first\n"))
    consumed = kafkakit(
        "consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning", "--max-messages", "1"
    )
    assert ok(consumed).splitlines() == ["first"]


def test_produce_fails_fast_when_the_broker_will_not_create_the_topic(tmp_path: Path) -> None:
    with BrokerMinServer(tmp_path / "no-auto-create", auto_create_topics_enable=False) as strict:
        started = time.monotonic()
        for command in (("produce",), ("perf", "produce", "--num-records", "10", "--record-size", "10")):
            result = kafkakit(
                *command, "--bootstrap-server", strict.bootstrap_servers, "--topic", "missing", input="x\n"
            )
            assert result.returncode == 1, (command, result.stderr)
            assert "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr and "did not create it" in result.stderr
        # two runs, each waiting at most AUTO_CREATE_WAIT_S: not max.block.ms (60 s)
        assert time.monotonic() - started < 2 * AUTO_CREATE_WAIT_S + 20


def test_produce_consume_round_trip(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    _create(broker, topic, 2)
    ok(
        kafkakit(
            "produce",
            "--bootstrap-server",
            bs,
            "--topic",
            topic,
            "--partition",
            "0",
            input="one\ntwo\nthree\n",
        )
    )
    # The example of docs/cli.md: two values, one per line, exit 0.
    out = ok(
        kafkakit(
            "consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning", "--max-messages", "2"
        )
    )
    assert out == "one\ntwo\n"

    lines = "h1:v1,h2:v2\tk1\tfirst\n\tk2\tsecond\n"  # an empty headers field: no headers
    ok(kafkakit(
        "produce", "--bootstrap-server", bs, "--topic", topic, "--partition", "1",
        "--property", "parse.headers=true", "--property", "parse.key=true", input=lines,
    ))  # fmt: skip
    json_lines = '{"key": "k3", "value": "third", "headers": {"x": "y"}, "partition": 1}\n{"value": null, "partition": 1}\n'
    ok(kafkakit("produce", "--bootstrap-server", bs, "--topic", topic, "--json", input=json_lines))
    out = ok(kafkakit(
        "consume", "--bootstrap-server", bs, "--topic", topic, "--partition", "1", "--offset", "0",
        "--max-messages", "4", "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "print.offset=true", "--property", "key.separator=|",
    ))  # fmt: skip
    assert out.splitlines() == [
        "Offset:0|h1:v1,h2:v2|k1|first",
        "Offset:1|NO_HEADERS|k2|second",
        "Offset:2|x:y|k3|third",
        "Offset:3|NO_HEADERS|null|null",
    ]
    out = ok(kafkakit(
        "consume", "--bootstrap-server", bs, "--topic", topic, "--partition", "1", "--offset", "2",
        "--max-messages", "1", "--format", "{partition}/{offset} {key}={value} [{headers}]",
    ))  # fmt: skip
    assert out == "1/2 k3=third [x:y]\n"
    records = [
        json.loads(line)
        for line in ok(
            kafkakit("consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning", "--timeout-ms", "1500",
                     "--output", "json")
        ).splitlines()
    ]  # fmt: skip
    assert sorted(r["value"] or "" for r in records) == sorted(
        ["one", "two", "three", "first", "second", "third", ""]
    )
    assert {r["key"] for r in records if r["partition"] == 1} == {"k1", "k2", "k3", None}
    assert next(r for r in records if r["value"] == "first")["headers"] == {"h1": "v1", "h2": "v2"}


def test_consume_positions_and_idle_timeout(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    _create(broker, topic)
    ok(kafkakit("produce", "--bootstrap-server", bs, "--topic", topic, input="a\nb\n"))
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    ok(kafkakit("produce", "--bootstrap-server", bs, "--topic", topic, input="c\nd\n"))
    out = ok(kafkakit("consume", "--bootstrap-server", bs, "--topic", topic, "--from-timestamp", str(middle),
                      "--timeout-ms", "1000"))  # fmt: skip
    assert out == "c\nd\n"
    # The default starts at the end: nothing old is printed, and --timeout-ms ends the wait.
    started = time.monotonic()
    result = kafkakit("consume", "--bootstrap-server", bs, "--topic", topic, "--timeout-ms", "800")
    assert ok(result) == "" and "Processed a total of 0 messages" in result.stderr
    assert time.monotonic() - started < 30
    out = ok(kafkakit("consume", "--bootstrap-server", bs, "--topic", topic, "--from-datetime", "2000-01-01T00:00:00Z",
                      "--max-messages", "4"))  # fmt: skip
    assert out == "a\nb\nc\nd\n"


def test_usage_errors_exit_2() -> None:
    # Every case is refused before any connection is made: the address is never dialled.
    bs = "127.0.0.1:9"
    cases = [
        (("produce", "--topic", "t", "--property", "parse.kee=true"), "parse.kee"),
        (("produce", "--topic", "t", "--property", "parse.key=maybe"), "parse.key"),
        (("produce", "--topic", "t", "--property", "novalue"), "key=value"),
        (("consume", "--topic", "t", "--property", "print.keys=true"), "print.keys"),
        (("consume", "--topic", "t", "--offset", "3"), "--partition"),
        (("consume", "--topic", "t", "--group", "g", "--partition", "0"), "--group"),
        (("consume", "--topic", "t", "--format", "{nope}"), "nope"),
        (("consume", "--topic", "t", "--from-datetime", "yesterday"), "ISO 8601"),
        (("topics", "create", "--topic", "t", "--config", "retention.ms"), "key=value"),
        (("topics", "create"), "--topic"),
        (("nonsense",), "invalid choice"),
        (("topics", "list", "--command-config", "/nonexistent/client.properties"), "--command-config"),
    ]
    results = kafkakit_many([(*args, "--bootstrap-server", bs) for args, _ in cases])
    for (args, named), result in zip(cases, results, strict=True):
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert named in result.stderr, (args, result.stderr)
    missing = kafkakit("topics", "list")
    assert missing.returncode == 2 and "KAFKAKIT_BOOTSTRAP_SERVERS" in missing.stderr


def test_bootstrap_from_environment_and_cluster_describe(broker: RunningBroker) -> None:
    env = {"KAFKAKIT_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
    text = ok(kafkakit("cluster", "describe", env=env))
    described = json.loads(ok(kafkakit("cluster", "describe", "--output", "json", env=env)))
    assert described["cluster_id"] and f"Cluster id: {described['cluster_id']}" in text
    assert described["controller"] >= 0 or broker.kind == "kafka"  # KRaft hides the controller from clients
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    assert [(b["host"], b["port"]) for b in described["brokers"]] == [(host, int(port))]
    assert f"{host}" in text and port in text


def test_perf_smoke(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    _create(broker, topic, 2)
    produced = json.loads(ok(kafkakit(
        "perf", "produce", "--bootstrap-server", bs, "--topic", topic, "--num-records", "2000",
        "--record-size", "50", "--output", "json",
    )))  # fmt: skip
    assert produced["records"] == 2000 and produced["failed"] == 0
    assert produced["records_per_sec"] > 0 and produced["mb_per_sec"] >= 0
    assert 0 < produced["p50_ms"] <= produced["p95_ms"] <= produced["p99_ms"] <= produced["p99_9_ms"]
    assert produced["p99_9_ms"] <= produced["max_latency_ms"]
    text = ok(kafkakit("perf", "produce", "--bootstrap-server", bs, "--topic", topic, "--num-records", "100", "--record-size", "50",
                       "--throughput", "1000"))  # fmt: skip
    assert text.startswith("100 records sent, ") and "ms 99.9th." in text
    consumed = json.loads(ok(kafkakit("perf", "consume", "--bootstrap-server", bs, "--topic", topic,
                                      "--messages", "2100", "--output", "json")))  # fmt: skip
    assert consumed["records"] == 2100 and consumed["bytes"] == 2100 * 50 and consumed["records_per_sec"] > 0
    short = kafkakit("perf", "consume", "--bootstrap-server", bs, "--topic", topic, "--messages", "5000",
                     "--timeout-ms", "500")  # fmt: skip
    assert short.returncode == 1 and "only 2100 of 5000" in short.stderr


def test_produce_acks_0_compression_and_rate(broker_min: RunningBroker, topic: str) -> None:
    _create(broker_min, topic)
    bs = broker_min.bootstrap_servers
    started = time.monotonic()
    ok(kafkakit("produce", "--bootstrap-server", bs, "--topic", topic, "--acks", "0", "--compression-type", "gzip",
                "--rate", "40", input="".join(f"r{i}\n" for i in range(20))))  # fmt: skip
    assert time.monotonic() - started >= 19 / 40  # --rate 40: the 20th record goes out no sooner than 0.475 s
    out = ok(
        kafkakit(
            "consume", "--bootstrap-server", bs, "--topic", topic, "--from-beginning", "--max-messages", "20"
        )
    )
    assert out.split() == [f"r{i}" for i in range(20)]


def test_failed_delivery_exits_1(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    _create(broker, topic, 1, "--config", "max.message.bytes=200")
    result = kafkakit(
        "produce", "--bootstrap-server", bs, "--topic", topic, input="small\n" + "x" * 2000 + "\n"
    )
    assert result.returncode == 1, result.stderr
    # The two records may share a batch, which the broker refuses as a whole.
    assert "MESSAGE_TOO_LARGE" in result.stderr and re.search(r"[12] of 2 record\(s\) failed", result.stderr)


def test_ctrl_c_exits_130(broker_min: RunningBroker, topic: str) -> None:
    _create(broker_min, topic)
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkakit.cli", "consume", "--bootstrap-server", broker_min.bootstrap_servers,
         "--topic", topic],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # Keep producing until a record comes out: then the consumer is surely in its loop.
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + 40
    while not lines and time.monotonic() < deadline and process.poll() is None:
        kafkakit(
            "produce", "--bootstrap-server", broker_min.bootstrap_servers, "--topic", topic, input="ping\n"
        )
        reader.join(0.5)
    assert lines == ["ping\n"]
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert "interrupted" in err


def test_properties_and_toml_command_config(tmp_path: Path) -> None:
    text = (
        "# comment\n! also a comment\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism:SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n    password="p=w:d";\n'
        "client.id=tab\\there\n"
    )
    props = read_properties_text(text)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["client.id"] == "tab\there"
    assert props["sasl.jaas.config"].endswith('username="alice" password="p=w:d";')
    settings = client_settings({k: v for k, v in props.items() if k != "security.protocol"})
    assert settings["sasl_plain_username"] == "alice" and settings["sasl_plain_password"] == "p=w:d"
    assert settings["client_id"] == "tab\there"
    toml_file = tmp_path / "client.toml"
    toml_file.write_text(
        'security.protocol = "SASL_PLAINTEXT"\n[sasl]\nmechanism = "PLAIN"\nusername = "u"\n'
    )
    assert read_command_config(str(toml_file)) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
    }
    warnings: list[str] = []
    assert client_settings({"linger.mss": "5"}, warn=warnings.append) == {}
    assert warnings and "linger.mss" in warnings[0]
