"""Third-party clients authenticate to the secured broker_min: SASL_SSL with SCRAM-SHA-512, and mTLS.

confluent-kafka (librdkafka), aiokafka, kafka-python and kcat each produce ten
records and read them back, and each is refused with a wrong password (the client
names the authentication failure, within a bounded time) while the broker keeps
serving the same client's correct login. ``KAFKAKIT_INTEROP_BROKER=kafka`` runs the
same tests against Apache Kafka with the same settings, which shows a failure is
broker_min's.

kcat from Debian links librdkafka 2.0.2, whose SCRAM client-final-message repeats the
client nonce (confluentinc/librdkafka#4895, fixed in 2.6.1). Apache Kafka 4.x and
broker_min refuse it, so kcat's SCRAM round trip is a strict xfail with such a
librdkafka, and kcat's SASL_SSL path is also run with PLAIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafkakit import Admin, NewTopic
from kafkakit.acls import AclBinding, AclOperation, PatternType, ResourceType

from tests.security_env import CLIENT_DN, USERS, SecureBroker, client_config

from .clients import kcat_binary

pytestmark = pytest.mark.interop

VALUES = [f"v{i}".encode() for i in range(10)]
GROUP_PREFIX = "interop-sec-"
TIMEOUT = 30.0
#: How long a client may take to report a refused login.
REFUSAL_TIMEOUT = 15.0
INTEROP_BROKER = os.environ.get("KAFKAKIT_INTEROP_BROKER", "broker_min")


@pytest.fixture(scope="session")
def secured(request: pytest.FixtureRequest) -> SecureBroker:
    """``secure_broker_min``, or ``secure_kafka`` when KAFKAKIT_INTEROP_BROKER=kafka (as interop_broker)."""
    if INTEROP_BROKER not in ("broker_min", "kafka"):
        raise pytest.UsageError(
            f"KAFKAKIT_INTEROP_BROKER must be broker_min or kafka, not {INTEROP_BROKER!r}"
        )
    fixture = "secure_kafka" if INTEROP_BROKER == "kafka" else "secure_broker_min"
    broker: SecureBroker = request.getfixturevalue(fixture)
    return broker


def _topic(broker: SecureBroker) -> str:
    """A fresh topic the certificate's principal may use (ALL on it, READ on our groups: it is no super user)."""
    name = f"interop-sec-{uuid.uuid4().hex[:8]}"

    async def setup() -> None:
        async with Admin(**client_config(broker, "SASL_SSL", "SCRAM-SHA-512")) as admin:
            await admin.create_topics([NewTopic(name, num_partitions=1)])
            await admin.create_acls([
                AclBinding(ResourceType.TOPIC, name, f"User:{CLIENT_DN}", AclOperation.ALL),
                AclBinding(ResourceType.GROUP, GROUP_PREFIX, f"User:{CLIENT_DN}", AclOperation.READ,
                           pattern_type=PatternType.PREFIXED),
            ])  # fmt: skip
        await asyncio.sleep(1.0)  # Kafka applies ACLs asynchronously

    asyncio.run(setup())
    return name


# -- confluent-kafka ----------------------------------------------------------------------------


def _confluent_config(broker: SecureBroker, mode: str, password: str) -> dict[str, Any]:
    pki = broker.pki
    if mode == "mtls":
        return {"bootstrap.servers": broker.listener("SSL"), "security.protocol": "SSL", "ssl.ca.location": pki.ca,
                "ssl.certificate.location": pki.client_cert, "ssl.key.location": pki.client_key}  # fmt: skip
    return {"bootstrap.servers": broker.listener("SASL_SSL"), "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": password}  # fmt: skip


def _confluent_round_trip(broker: SecureBroker, topic: str, mode: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    config = _confluent_config(broker, mode, USERS["admin"])
    producer = Producer(config)
    for value in VALUES:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {**config, "group.id": GROUP_PREFIX + uuid.uuid4().hex[:6], "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < len(VALUES) and time.monotonic() < deadline:
        for message in consumer.consume(10, timeout=1.0):
            assert message.error() is None, message.error()
            got.append(message.value())
    consumer.close()
    return got


def _confluent_refused(broker: SecureBroker) -> str:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({**_confluent_config(broker, "scram", "wrong"), "error_cb": errors.append})
    # The call itself fails as a transport failure; librdkafka gives the reason through error_cb.
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # error_cb runs from poll
    refusals = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert refusals, errors
    assert "Authentication failed" in refusals[0].str(), refusals[0]
    return str(refusals[0])


# -- aiokafka ----------------------------------------------------------------------------------


def _aiokafka_config(broker: SecureBroker, mode: str, password: str) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    pki = broker.pki
    if mode == "mtls":
        return {"bootstrap_servers": broker.listener("SSL"), "security_protocol": "SSL",
                "ssl_context": create_ssl_context(cafile=pki.ca, certfile=pki.client_cert, keyfile=pki.client_key)}  # fmt: skip
    return {"bootstrap_servers": broker.listener("SASL_SSL"), "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=pki.ca), "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin", "sasl_plain_password": password}  # fmt: skip


def _aiokafka_round_trip(broker: SecureBroker, topic: str, mode: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**_aiokafka_config(broker, mode, USERS["admin"]))
        await producer.start()
        try:
            for value in VALUES:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**_aiokafka_config(broker, mode, USERS["admin"]), enable_auto_commit=False,
                                    auto_offset_reset="earliest")  # fmt: skip
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < len(VALUES) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(r.value for r in records)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _aiokafka_refused(broker: SecureBroker) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    async def start_producer() -> None:
        producer = AIOKafkaProducer(**_aiokafka_config(broker, "scram", "wrong"), request_timeout_ms=10000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    # A producer raises "Unable to bootstrap" and logs the broker's SASL refusal ...
    with _logged("aiokafka") as lines, pytest.raises(KafkaConnectionError):
        asyncio.run(start_producer())
    assert any("SaslAuthenticationFailed" in line for line in lines), lines

    # ... which a connection of its own raises as SaslAuthenticationFailed (error 58).
    async def connect() -> None:
        config = _aiokafka_config(broker, "scram", "wrong")
        host, port = config.pop("bootstrap_servers").rsplit(":", 1)
        conn = await create_conn(host, int(port), request_timeout_ms=10000, **config)
        conn.close()

    with pytest.raises(SaslAuthenticationFailed) as refused:
        asyncio.run(connect())
    return str(refused.value)


@contextlib.contextmanager
def _logged(logger_name: str, level: int = logging.NOTSET) -> Iterator[list[str]]:
    """The messages a client library logs meanwhile (where it reports what the broker said)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(logger_name)
    previous = logger.level
    logger.addHandler(handler)
    if level:
        logger.setLevel(level)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


# -- kafka-python --------------------------------------------------------------------------------


def _kafka_python_config(broker: SecureBroker, mode: str, password: str) -> dict[str, Any]:
    pki = broker.pki
    if mode == "mtls":
        return {"bootstrap_servers": broker.listener("SSL"), "security_protocol": "SSL", "ssl_cafile": pki.ca,
                "ssl_certfile": pki.client_cert, "ssl_keyfile": pki.client_key}  # fmt: skip
    return {"bootstrap_servers": broker.listener("SASL_SSL"), "security_protocol": "SASL_SSL", "ssl_cafile": pki.ca,
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin", "sasl_plain_password": password}  # fmt: skip


def _kafka_python_round_trip(broker: SecureBroker, topic: str, mode: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(**_kafka_python_config(broker, mode, USERS["admin"]))
    for value in VALUES:
        producer.send(topic, value, partition=0).get(timeout=TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(**_kafka_python_config(broker, mode, USERS["admin"]), enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT * 1000))  # fmt: skip
    consumer.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    for message in consumer:
        got.append(message.value)
        if len(got) == len(VALUES):
            break
    consumer.close()
    return got


def _kafka_python_refused(broker: SecureBroker) -> str:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    # kafka-python retries the bootstrap until bootstrap_timeout_ms, then raises KafkaTimeoutError;
    # the refusal itself only reaches its log.  When the broker's close arrives together with its
    # SaslAuthenticate error answer (Kafka closes right after answering), kafka-python may report
    # just "socket disconnected" instead of SaslAuthenticationFailedError, so the check is on the
    # broker's answer as kafka-python received and logged it (DEBUG), which both brokers send.
    with _logged("kafka", logging.DEBUG) as lines, pytest.raises(KafkaTimeoutError):
        KafkaAdminClient(**_kafka_python_config(broker, "scram", "wrong"), request_timeout_ms=5000,
                         bootstrap_timeout_ms=5000)  # fmt: skip
    failures = [
        line for line in lines if "SaslAuthenticationFailedError" in line or "Authentication failed" in line
    ]
    assert failures, "\n".join(lines[-20:])
    return failures[0]


# -- kcat ------------------------------------------------------------------------------------------


def kcat_librdkafka() -> tuple[int, ...] | None:
    """The librdkafka version kcat links (``kcat -V``), or None without kcat."""
    binary = kcat_binary()
    if binary is None:
        return None
    version = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", version)
    assert found, version
    return tuple(int(part) for part in found.groups())


def kcat_scram_broken() -> bool:
    """Whether kcat's librdkafka repeats the client nonce in SCRAM's client-final-message.

    librdkafka did so from 0.0.99 until 2.6.1 (confluentinc/librdkafka#4895); Apache Kafka 4.x
    (after CVE-2024-56128) and broker_min both refuse it, as RFC 5802 says: "invalid credentials".
    Debian bookworm's kcat links 2.0.2.
    """
    version = kcat_librdkafka()
    return version is not None and version < (2, 6, 1)


def _kcat_args(broker: SecureBroker, mode: str, password: str) -> list[str]:
    """``mode``: "scram" (SASL_SSL, SCRAM-SHA-512), "plain" (SASL_SSL, PLAIN) or "mtls" (SSL)."""
    pki = broker.pki
    if mode == "mtls":
        return ["-b", broker.listener("SSL"), "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}",
                "-X", f"ssl.certificate.location={pki.client_cert}", "-X", f"ssl.key.location={pki.client_key}"]  # fmt: skip
    mechanism = "PLAIN" if mode == "plain" else "SCRAM-SHA-512"
    return ["-b", broker.listener("SASL_SSL"), "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca}",
            "-X", f"sasl.mechanisms={mechanism}", "-X", "sasl.username=admin", "-X", f"sasl.password={password}"]  # fmt: skip


def _kcat(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    binary = kcat_binary()
    if binary is None:
        pytest.skip("neither kcat nor kafkacat is on PATH (apt-get install kcat; .ci/run installs it)")
    return subprocess.run([binary, *args], input=stdin, capture_output=True, timeout=TIMEOUT)


def _kcat_round_trip(broker: SecureBroker, topic: str, mode: str) -> list[bytes]:
    base = _kcat_args(broker, mode, USERS["admin"])
    produced = _kcat([*base, "-P", "-t", topic, "-p", "0"], b"\n".join(VALUES) + b"\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat([*base, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(VALUES)), "-e",
                      "-X", "socket.timeout.ms=10000"])  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.split()


def _kcat_refused(broker: SecureBroker) -> str:
    # With the nonce bug even the right password is refused over SCRAM: PLAIN shows it is the password.
    result = _kcat([*_kcat_args(broker, _kcat_sasl_mode(), "wrong"), "-L", "-m", "5"])
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode != 0, stderr
    assert "SASL authentication error: Authentication failed" in stderr, stderr
    return stderr


def _kcat_sasl_mode() -> str:
    return "plain" if kcat_scram_broken() else "scram"


ROUND_TRIPS: dict[str, Callable[[SecureBroker, str, str], list[bytes]]] = {
    "confluent": _confluent_round_trip,
    "aiokafka": _aiokafka_round_trip,
    "kafka-python": _kafka_python_round_trip,
    "kcat": _kcat_round_trip,
}
REFUSALS: dict[str, Callable[[SecureBroker], str]] = {
    "confluent": _confluent_refused,
    "aiokafka": _aiokafka_refused,
    "kafka-python": _kafka_python_refused,
    "kcat": _kcat_refused,
}


@pytest.mark.parametrize("mode", ["scram", "mtls"])
@pytest.mark.parametrize("client", list(ROUND_TRIPS))
def test_client_round_trip(
    secured: SecureBroker, client: str, mode: str, request: pytest.FixtureRequest
) -> None:
    """Ten records produced and read back: SASL_SSL + SCRAM-SHA-512 as admin, or mTLS as the DN."""
    if client == "kcat" and mode == "scram" and kcat_scram_broken():
        request.applymarker(pytest.mark.xfail(
            reason=f"kcat links librdkafka {kcat_librdkafka()}, whose SCRAM repeats the client nonce "
                   "(confluentinc/librdkafka#4895, fixed in 2.6.1); Kafka 4.x refuses it too",
            raises=AssertionError, strict=True,
        ))  # fmt: skip
    started = time.monotonic()
    topic = _topic(secured)
    assert ROUND_TRIPS[client](secured, topic, mode) == VALUES
    assert time.monotonic() - started < TIMEOUT


def test_kcat_round_trip_over_sasl_ssl_with_plain(secured: SecureBroker) -> None:
    """kcat's SASL_SSL path with a mechanism its librdkafka gets right, whatever its version."""
    assert _kcat_round_trip(secured, _topic(secured), "plain") == VALUES


@pytest.mark.parametrize("client", list(REFUSALS))
def test_client_with_a_wrong_password_is_refused_and_the_broker_serves_on(
    secured: SecureBroker, client: str
) -> None:
    started = time.monotonic()
    reason = REFUSALS[client](secured)
    assert time.monotonic() - started < REFUSAL_TIMEOUT, reason
    assert "uthenticat" in reason, reason
    # A correct login by the same client still works: the broker keeps serving.
    mode = _kcat_sasl_mode() if client == "kcat" else "scram"
    assert ROUND_TRIPS[client](secured, _topic(secured), mode) == VALUES
    assert time.monotonic() - started < TIMEOUT


def test_kcat_scram_is_refused_as_kafka_refuses_it_while_librdkafka_has_the_nonce_bug(
    secured: SecureBroker,
) -> None:
    """The peer bug behind kcat_scram_broken, pinned with the right password: "invalid credentials"."""
    if kcat_binary() is not None and not kcat_scram_broken():
        pytest.skip(f"kcat's librdkafka {kcat_librdkafka()} does not repeat the SCRAM nonce")
    result = _kcat([*_kcat_args(secured, "scram", USERS["admin"]), "-L", "-m", "5"])
    assert result.returncode != 0 and b"invalid credentials" in result.stderr, result.stderr
