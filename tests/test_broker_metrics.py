"""broker_min's Prometheus endpoint (``metrics_port``): scraped over real HTTP while real clients work.

Each test runs its own broker in this process (several brokers with separate
registries) and scrapes ``http://<metrics_address>/metrics`` with urllib, in a
thread, since the endpoint is served by the broker's event loop, which is this
test's loop.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer
from kafkakit.broker import Broker
from kafkakit.broker.handlers.fetch import PartitionResult, encode_fetch_response
from kafkakit.broker.metrics import (
    LATENCY_BUCKETS,
    api_name,
    error_name,
    fetch_response_partitions,
    record_count,
)
from kafkakit.errors import KafkaConfigError, SaslAuthenticationError, TopicAlreadyExistsError
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from tests.brokers import BrokerMinProcess, free_port, new_topic_name

RECORDS = 1000
VALUE = b"v" * 100


class Scrape:
    """One parsed scrape: ``value(sample name, **labels)`` and ``total(sample name, **labels)``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples.append((sample.name, dict(sample.labels), sample.value))

    def matching(self, name: str, **labels: str) -> list[float]:
        return [
            v for n, lab, v in self.samples if n == name and all(lab.get(k) == w for k, w in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        found = self.matching(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {found}"
        return found[0]

    def total(self, name: str, **labels: str) -> float:
        return sum(self.matching(name, **labels))


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def scrape(broker: Broker) -> Scrape:
    status, content_type, body = await asyncio.to_thread(_get, f"http://{broker.metrics_address}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    return Scrape(body)


async def test_no_metrics_port_means_no_metrics(tmp_path: Path) -> None:
    async with Broker(tmp_path) as broker:
        assert broker.metrics_address is None
        assert broker.metrics_registry is None
    with pytest.raises(KafkaConfigError):
        Broker(tmp_path, metrics_port=70000)
    with pytest.raises(KafkaConfigError):
        Broker(tmp_path, metrics_port="9308")


async def test_produce_consume_and_a_group_are_counted(tmp_path: Path) -> None:
    topic = new_topic_name("metrics")
    async with Broker(tmp_path, metrics_port=0) as broker:
        bootstrap = broker.bootstrap_servers
        empty = await scrape(broker)
        assert empty.value("kafkakit_broker_bytes_in_total") == 0
        assert empty.value("kafkakit_broker_groups", state="Stable") == 0
        assert empty.types["kafkakit_broker_request_duration_seconds"] == "histogram"

        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(topic, 1)])
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5, enable_idempotence=True) as producer:
            for i in range(RECORDS):
                await producer.send(topic, VALUE, key=b"%04d" % i)
            await producer.flush()

        group = new_topic_name("group")
        consumer = Consumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", fetch_max_wait_ms=100
        )
        async with consumer:
            consumer.subscribe([topic])
            seen = 0
            async with asyncio.timeout(30):
                while seen < RECORDS:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        seen += len(records)
            await consumer.commit()
            during = await scrape(broker)
        # The broker sees the clients' connections close a moment after they do.
        after = await scrape(broker)
        async with asyncio.timeout(10):
            while after.value("kafkakit_broker_connections", listener="PLAINTEXT"):
                await asyncio.sleep(0.05)
                after = await scrape(broker)
        log_size = broker.state.logs.get(topic, 0).size_in_bytes  # type: ignore[union-attr]

    assert seen == RECORDS
    # Per topic and in total: what Produce appended is what the log holds, and one consumer
    # reading it once from the start was sent exactly that.
    assert during.value("kafkakit_broker_topic_messages_in_total", topic=topic) == RECORDS
    assert during.value("kafkakit_broker_messages_in_total") == RECORDS
    assert during.value("kafkakit_broker_topic_bytes_in_total", topic=topic) == log_size
    assert during.value("kafkakit_broker_bytes_in_total") == log_size
    assert during.value("kafkakit_broker_log_size_bytes", topic=topic, partition="0") == log_size
    assert during.value("kafkakit_broker_log_start_offset", topic=topic, partition="0") == 0
    assert during.value("kafkakit_broker_log_end_offset", topic=topic, partition="0") == RECORDS
    assert during.value("kafkakit_broker_log_segments", topic=topic, partition="0") == 1
    assert during.value("kafkakit_broker_topic_bytes_out_total", topic=topic) == log_size
    # The idempotent producer's id is tracked by the topic's partition.
    assert during.value("kafkakit_broker_producer_ids") == 1
    assert during.value("kafkakit_broker_groups", state="Stable") == 1
    assert after.value("kafkakit_broker_groups", state="Stable") == 0
    assert after.value("kafkakit_broker_groups", state="Empty") == 1
    # Requests: exact where the test decides how many there are.
    assert after.value("kafkakit_broker_requests_total", api="CreateTopics", version="7") == 2
    assert (
        after.value("kafkakit_broker_request_errors_total", api="CreateTopics", error="TOPIC_ALREADY_EXISTS")
        == 1
    )
    assert after.total("kafkakit_broker_requests_total", api="JoinGroup") >= 1
    assert after.total("kafkakit_broker_requests_total", api="Produce") >= 1
    assert after.total("kafkakit_broker_requests_total", api="Fetch") >= 1
    assert not after.matching("kafkakit_broker_request_errors_total", api="Produce")
    # The histogram counts every request once, per API.
    for api in ("Produce", "Fetch", "ApiVersions", "Metadata", "CreateTopics", "SyncGroup"):
        requests = after.total("kafkakit_broker_requests_total", api=api)
        assert after.value("kafkakit_broker_request_duration_seconds_count", api=api) == requests
        assert after.value("kafkakit_broker_request_duration_seconds_bucket", api=api, le="+Inf") == requests
        assert after.value("kafkakit_broker_request_duration_seconds_sum", api=api) > 0
    buckets = [
        after.value("kafkakit_broker_request_duration_seconds_bucket", api="Produce", le=str(b))
        for b in LATENCY_BUCKETS
    ]
    assert buckets == sorted(buckets)
    # Connections: every client closed, the network counters saw at least the record bytes.
    assert after.value("kafkakit_broker_connections", listener="PLAINTEXT") == 0
    created = after.value("kafkakit_broker_connections_created_total", listener="PLAINTEXT")
    assert created == after.value("kafkakit_broker_connections_closed_total", listener="PLAINTEXT") >= 3
    assert during.value("kafkakit_broker_connections", listener="PLAINTEXT") >= 1
    assert after.value("kafkakit_broker_network_received_bytes_total", listener="PLAINTEXT") > log_size
    assert after.value("kafkakit_broker_network_sent_bytes_total", listener="PLAINTEXT") > log_size


async def test_transactions_by_state(tmp_path: Path) -> None:
    topic = new_topic_name("metrics-txn")
    async with Broker(tmp_path, metrics_port=0) as broker:
        bootstrap = broker.bootstrap_servers
        async with Producer(bootstrap_servers=bootstrap, transactional_id=new_topic_name("txn")) as producer:
            await producer.init_transactions()
            initialised = await scrape(broker)
            producer.begin_transaction()
            for _ in range(10):
                await producer.send(topic, VALUE, partition=0)
            await producer.flush()
            ongoing = await scrape(broker)
            await producer.commit_transaction()
            committed = await scrape(broker)
        records = broker.state.logs.get(topic, 0)
        assert records is not None
        end_offset = records.log_end_offset
    assert initialised.value("kafkakit_broker_transactions", state="Empty") == 1
    assert ongoing.value("kafkakit_broker_transactions", state="Ongoing") == 1
    assert ongoing.value("kafkakit_broker_transactions", state="Empty") == 0
    assert committed.value("kafkakit_broker_transactions", state="Ongoing") == 0
    assert committed.value("kafkakit_broker_transactions", state="CompleteCommit") == 1
    assert committed.value("kafkakit_broker_requests_total", api="EndTxn", version="5") == 1
    assert committed.value("kafkakit_broker_topic_messages_in_total", topic=topic) == 10
    # Ten records and the commit marker.
    assert committed.value("kafkakit_broker_log_end_offset", topic=topic, partition="0") == end_offset == 11
    assert committed.value("kafkakit_broker_producer_ids") >= 1


async def test_acks_0_produce_is_counted_without_a_response(tmp_path: Path) -> None:
    topic = new_topic_name("metrics-acks0")
    async with Broker(tmp_path, metrics_port=0) as broker:
        async with Producer(bootstrap_servers=broker.bootstrap_servers, acks=0) as producer:
            for _ in range(100):
                await producer.send(topic, VALUE, partition=0)
            await producer.flush()
        # Nothing answers acks=0, so the client cannot know when the broker is done: wait for the count.
        async with asyncio.timeout(10):
            while (metrics := await scrape(broker)).total("kafkakit_broker_topic_messages_in_total") < 100:
                await asyncio.sleep(0.05)
        log_size = broker.state.logs.get(topic, 0).size_in_bytes  # type: ignore[union-attr]
    assert metrics.value("kafkakit_broker_topic_messages_in_total", topic=topic) == 100
    assert metrics.value("kafkakit_broker_log_end_offset", topic=topic, partition="0") == 100
    assert metrics.value("kafkakit_broker_topic_bytes_in_total", topic=topic) == log_size
    produce = metrics.total("kafkakit_broker_requests_total", api="Produce")
    assert produce >= 1
    assert metrics.value("kafkakit_broker_request_duration_seconds_count", api="Produce") == produce


async def _raw_request(address: str, api_key: int, version: int) -> bytes:
    """Send one bare request header (client id "raw"); the answer's bytes, or b"" when the broker closes."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = struct.pack(">hhih", api_key, version, 7, 3) + b"raw"
    writer.write(struct.pack(">i", len(body)) + body)
    try:
        async with asyncio.timeout(5):
            size = await reader.read(4)
            return await reader.readexactly(struct.unpack(">i", size)[0]) if size else b""
    finally:
        writer.close()


async def test_unknown_apis_and_versions_share_one_label_each(tmp_path: Path) -> None:
    """A client can send any int16 as api key or version; the series must not grow with them."""
    async with Broker(tmp_path, metrics_port=0) as broker:
        for api_key in (1000, 2000, 32000):
            assert await _raw_request(broker.bootstrap_servers, api_key, 0) == b""  # closed
        for version in (100, 200):
            await _raw_request(broker.bootstrap_servers, 18, version)  # ApiVersions answers v0
        metrics = await scrape(broker)
    assert metrics.value("kafkakit_broker_requests_total", api="Unknown", version="unsupported") == 3
    assert metrics.value("kafkakit_broker_requests_total", api="ApiVersions", version="unsupported") == 2
    assert (
        metrics.value("kafkakit_broker_request_errors_total", api="ApiVersions", error="UNSUPPORTED_VERSION")
        == 2
    )
    assert len(metrics.matching("kafkakit_broker_requests_total")) == 2


async def test_sasl_logins_are_counted(tmp_path: Path) -> None:
    settings: dict[str, Any] = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
        ),
        "connection.failed.authentication.delay.ms": 0,
    }
    async with Broker(tmp_path, metrics_port=0, **settings) as broker:
        login: dict[str, Any] = {
            "bootstrap_servers": broker.bootstrap_servers,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
        }
        async with Admin(**login, sasl_plain_password="alice-secret") as admin:
            await admin.create_topics([NewTopic(new_topic_name("sasl"), 1)])
        with pytest.raises(SaslAuthenticationError):
            async with Admin(**login, sasl_plain_password="wrong", request_timeout_ms=5000) as admin:
                await admin.create_topics([NewTopic(new_topic_name("sasl"), 1)])
        metrics = await scrape(broker)
    labels = {"listener": "SASL_PLAINTEXT", "mechanism": "PLAIN"}
    assert metrics.value("kafkakit_broker_successful_authentication_total", **labels) >= 1
    assert metrics.value("kafkakit_broker_failed_authentication_total", **labels) == 1
    assert (
        metrics.value(
            "kafkakit_broker_request_errors_total", api="SaslAuthenticate", error="SASL_AUTHENTICATION_FAILED"
        )
        == 1
    )


async def test_endpoint_http_behaviour_and_stop_frees_the_port(tmp_path: Path) -> None:
    first = Broker(tmp_path / "a", metrics_port=0)
    second = Broker(tmp_path / "b", metrics_port=0)
    async with first, second:
        assert first.metrics_address != second.metrics_address
        base = f"http://{first.metrics_address}"
        status, _, body = await asyncio.to_thread(_get, base + "/nothing")
        assert status == 404 and "/metrics" in body
        status, content_type, body = await asyncio.to_thread(
            _get, base + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert status == 200 and content_type.startswith("application/openmetrics-text")
        assert body.rstrip().endswith("# EOF")
        # Each broker has its own registry: only the first one served requests.
        async with Admin(bootstrap_servers=first.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(new_topic_name("own"), 1)])
        assert (await scrape(first)).total("kafkakit_broker_requests_total", api="CreateTopics") == 1
        assert (await scrape(second)).total("kafkakit_broker_requests_total", api="CreateTopics") == 0
        port = int(str(first.metrics_address).rpartition(":")[2])
        # A scraper that connects and says nothing must not keep stop() waiting.
        idle = await asyncio.open_connection("127.0.0.1", port)
    idle[1].close()
    with socket.socket() as probe:  # the port is free again
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    async with Broker(tmp_path / "a", metrics_port=port) as again:
        assert again.metrics_address == f"127.0.0.1:{port}"
        assert (await scrape(again)).value("kafkakit_broker_partitions") == 1


def test_cli_metrics_port(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerMinProcess(tmp_path / "data", extra_args=["--metrics-port", str(port)])
    broker.start()
    try:
        status, _, body = _get(f"http://127.0.0.1:{port}/metrics")
        metrics = Scrape(body)
        assert status == 200
        # The start-up check's ApiVersions request was counted.
        assert metrics.total("kafkakit_broker_requests_total", api="ApiVersions") >= 1
    finally:
        broker.stop()
    assert f"metrics on http://127.0.0.1:{port}/metrics" in broker.log_path.read_text()


class _Slice:
    """Stands in for a segment file slice: the parser only needs its length."""

    def __init__(self, length: int) -> None:
        self.length = length


def test_fetch_response_parser_reads_every_version_the_broker_writes() -> None:
    records = [b"x" * 70, _Slice(90_000)]
    for version in (4, 5, 7, 11, 12):
        for data in records:
            results = [
                ("a", [PartitionResult(0, 0, 5, 5, 0, None, data), PartitionResult(1, 6)]),  # type: ignore[arg-type]
                ("bb", [PartitionResult(2, 0, 1, 1, 0, [(7, 0), (8, 1)], b"")]),
            ]
            response = encode_fetch_response(version, ErrorCode.none, results)
            size = 70 if isinstance(data, bytes) else data.length
            assert list(fetch_response_partitions(version, response.parts)) == [
                ("a", 0, size),
                ("a", 6, 0),
                ("bb", 0, 0),
            ], version
    session_error = encode_fetch_response(12, ErrorCode.fetch_session_id_not_found, [])
    assert list(fetch_response_partitions(12, session_error.parts)) == [("", 70, 0)]
    assert record_count(b"") == 0


def test_unknown_api_key_is_one_label() -> None:
    assert api_name(0) == "Produce"
    assert api_name(18) == "ApiVersions"
    assert api_name(22) == "InitProducerId"
    assert api_name(32000) == "Unknown"
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
