"""TLS and SASL end to end: kafkakit's clients against secured broker_min and Apache Kafka.

Both brokers run with identical settings (tests/security_env.py), so every test
here is also an interoperability test of broker_min's authentication.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, Producer, TopicPartition
from kafkakit.acls import UserScramCredentialDeletion, UserScramCredentialUpsertion
from kafkakit.errors import (
    KafkaConfigError,
    KafkaConnectionError,
    NotYetSupportedError,
    SaslAuthenticationError,
    SslAuthenticationError,
    SSLVerificationError,
    UnsupportedSaslMechanismError,
)
from kafkakit.security.oauthbearer import OAuthBearerToken, unsecured_token
from kafkakit.security.tls import create_ssl_context

from tests.security_env import CLIENT_DN, REAUTH_MS, SecureBroker, SecureBrokerMin, client_config

#: (listener, mechanism) pairs covering every mechanism and both SASL listeners, plus mTLS.
LOGINS = [
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_PLAINTEXT", "OAUTHBEARER"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "OAUTHBEARER"),
    ("SSL", "mTLS"),
]
#: A refused login must surface within this many seconds, not after retries.
FAST = 10.0


async def _round_trip(config: dict[str, Any], topic: str, count: int = 20) -> list[bytes]:
    """Produce ``count`` records and read them back with a group consumer (so the coordinator connection is secured too)."""
    async with Producer(**config) as producer:
        await asyncio.gather(*[await producer.send(topic, f"v{i}".encode()) for i in range(count)])
    values: list[bytes] = []
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with Consumer(topic, group_id=group, auto_offset_reset="earliest", **config) as consumer:
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        await consumer.commit()
        assert await consumer.committed(TopicPartition(topic, 0)) == count
    return values


@pytest.mark.parametrize(("listener", "mechanism"), LOGINS, ids=[f"{a}-{b}" for a, b in LOGINS])
async def test_produce_and_consume_over_each_listener_and_mechanism(
    secure_broker: SecureBroker, topic: str, listener: str, mechanism: str
) -> None:
    config = client_config(secure_broker, listener, mechanism, user="admin")
    if listener == "SSL":  # the certificate's DN is an ordinary principal: grant it the topic and groups
        await _grant_certificate(secure_broker, topic)
    values = await _round_trip(config, topic)
    assert values == [f"v{i}".encode() for i in range(20)]


async def _grant_certificate(broker: SecureBroker, topic: str) -> None:
    """ALL on ``topic`` and READ on groups ``g-*`` for the client certificate's DN; waits until it applies."""
    from kafkakit.acls import AclBinding, AclOperation, PatternType, ResourceType

    principal = f"User:{CLIENT_DN}"
    async with Admin(**client_config(broker, "SASL_SSL", "SCRAM-SHA-256", user="admin")) as admin:
        await admin.create_topics([_new_topic(topic)])
        await admin.create_acls([
            AclBinding(ResourceType.TOPIC, topic, principal, AclOperation.ALL),
            AclBinding(ResourceType.GROUP, "g-", principal, AclOperation.READ, pattern_type=PatternType.PREFIXED),
        ])  # fmt: skip
    deadline = time.monotonic() + 10
    while True:  # Kafka applies new ACLs asynchronously
        try:
            async with Admin(**client_config(broker, "SSL")) as admin:
                if topic in await admin.list_topics():
                    return
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "the certificate's principal never saw the topic"
        await asyncio.sleep(0.3)


def _new_topic(name: str) -> Any:
    from kafkakit import NewTopic

    return NewTopic(name, num_partitions=1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_fails_fast_naming_mechanism_and_broker(secure_broker: SecureBroker, mechanism: str) -> None:
    config = client_config(secure_broker, "SASL_SSL", mechanism, user="alice", password="not-her-password")
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationError) as caught:
        async with Producer(**config):
            pass
    assert time.monotonic() - started < FAST
    message = str(caught.value)
    assert mechanism in message
    assert config["bootstrap_servers"] in message
    assert not caught.value.retriable


async def test_unknown_scram_user_is_refused_like_a_wrong_password(secure_broker: SecureBroker) -> None:
    config = client_config(secure_broker, "SASL_SSL", "SCRAM-SHA-512", user="alice")
    config["sasl_plain_username"] = "mallory"
    with pytest.raises(SaslAuthenticationError):
        async with Admin(**config) as admin:
            await admin.list_topics()


async def test_mechanism_the_listener_does_not_enable_lists_the_enabled_ones(secure_broker: SecureBroker) -> None:
    config = client_config(secure_broker, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    started = time.monotonic()
    with pytest.raises(UnsupportedSaslMechanismError) as caught:
        async with Producer(**config):
            pass
    assert time.monotonic() - started < FAST
    for enabled in ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"):
        assert enabled in str(caught.value)


async def test_untrusted_certificate_fails_naming_host_and_reason(secure_broker: SecureBroker) -> None:
    config = client_config(secure_broker, "SASL_SSL", "PLAIN")
    config["ssl_context"] = create_ssl_context(cafile=secure_broker.pki.stranger_ca)
    started = time.monotonic()
    with pytest.raises(SSLVerificationError) as caught:
        async with Producer(**config):
            pass
    assert time.monotonic() - started < FAST
    host = config["bootstrap_servers"].rsplit(":", 1)[0]
    assert host in str(caught.value)
    assert "certificate" in str(caught.value).lower()


async def test_mtls_listener_refuses_a_client_without_certificate(secure_broker: SecureBroker) -> None:
    """Kafka's TLS alert ("certificate required") becomes a fast SslAuthenticationError.

    broker_min cannot send that alert: asyncio (3.11-3.13) aborts a server transport whose
    handshake failed without flushing OpenSSL's alert, so the client sees the socket close.
    It then reports a connection error that names the likely cause, and retries it as any
    lost connection until its request timeout (kept short here).
    """
    config = client_config(secure_broker, "SSL")
    config["ssl_context"] = create_ssl_context(cafile=secure_broker.pki.ca)  # trusts the broker, shows no cert
    started = time.monotonic()
    if secure_broker.kind == "kafka":
        with pytest.raises(SslAuthenticationError, match="client certificate"):
            async with Admin(**config) as admin:
                await admin.list_topics()
        assert time.monotonic() - started < FAST
        return
    with pytest.raises(KafkaConnectionError, match="require a client certificate"):
        async with Admin(request_timeout_ms=3000, **config) as admin:
            await admin.list_topics()
    assert time.monotonic() - started < FAST


async def test_oauth_token_provider_sync_async_and_extensions(secure_broker: SecureBroker, topic: str) -> None:
    calls: list[str] = []

    async def provider() -> OAuthBearerToken:
        calls.append("async")
        return OAuthBearerToken(unsecured_token("admin"), int((time.time() + 600) * 1000), extensions={"traceId": "abc"})

    config = client_config(secure_broker, "SASL_SSL", "OAUTHBEARER")
    config["sasl_oauth_token_provider"] = provider
    async with Producer(**config) as producer:
        assert (await producer.send_and_wait(topic, b"x")).offset >= 0
    assert calls  # the async provider was used, and its extension was accepted


async def test_reauthentication_keeps_in_flight_requests(
    secure_broker: SecureBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """KIP-368: OAUTHBEARER sessions on SASL_PLAINTEXT last REAUTH_MS (and tokens here live 5 s),
    so a client producing and consuming across several sessions re-authenticates on its open
    connections, fetching fresh tokens, without failing a request or losing a record."""
    tokens: list[float] = []

    def provider() -> tuple[str, float]:
        tokens.append(time.monotonic())
        return unsecured_token("admin", lifetime_seconds=5), 5.0

    config = client_config(secure_broker, "SASL_PLAINTEXT", "OAUTHBEARER")
    config["sasl_oauth_token_provider"] = provider
    sent: list[bytes] = []
    received: list[bytes] = []
    deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000
    tp = TopicPartition(topic, 0)
    async with Producer(linger_ms=5, **config) as producer, Consumer(auto_offset_reset="earliest", **config) as consumer:
        consumer.assign([tp])
        while time.monotonic() < deadline:
            values = [f"{len(sent) + i}".encode() for i in range(50)]
            await asyncio.gather(*[await producer.send(topic, v, partition=0) for v in values])
            sent.extend(values)
            for records in (await consumer.getmany(timeout_ms=50)).values():
                received.extend(r.value for r in records)
        while len(received) < len(sent):
            batches = await consumer.getmany(timeout_ms=1000)
            assert batches, f"{len(sent) - len(received)} records never arrived"
            for records in batches.values():
                received.extend(r.value for r in records)
    assert received == sent  # nothing lost, nothing twice, in order
    # Each client refreshes its token at 80% of its 5 s life: over 3.5 sessions, at least two each.
    assert len(tokens) >= 4
    if secure_broker.kind == "broker_min":  # in this process: its log shows no session ran out
        assert not [r for r in caplog.records if "expired" in r.getMessage()], "a session was not re-authenticated"


async def test_admin_manages_scram_credentials_and_the_new_user_logs_in(secure_broker: SecureBroker) -> None:
    user = f"carol-{uuid.uuid4().hex[:6]}"
    admin_config = client_config(secure_broker, "SASL_SSL", "SCRAM-SHA-256", user="admin")
    async with Admin(**admin_config) as admin:
        await admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-512", "carol-secret", iterations=8192)]
        )
        described = await admin.describe_user_scram_credentials([user])
        assert [(c.mechanism, c.iterations) for c in described[user]] == [("SCRAM-SHA-512", 8192)]
    login = dict(admin_config, sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password="carol-secret")
    deadline = time.monotonic() + 10
    while True:  # Kafka propagates new credentials through its metadata log
        try:
            async with Admin(**login) as admin:
                await admin.describe_cluster()
            break
        except SaslAuthenticationError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)
    async with Admin(**admin_config) as admin:
        await admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])
    deadline = time.monotonic() + 10
    while True:
        try:
            async with Admin(**login) as admin:
                await admin.describe_cluster()
        except SaslAuthenticationError:
            break
        assert time.monotonic() < deadline, "a deleted credential still logs in"
        await asyncio.sleep(0.3)


def test_client_settings_are_checked_and_named() -> None:
    with pytest.raises(KafkaConfigError, match="security_protocol"):
        Producer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_TLS")
    with pytest.raises(KafkaConfigError, match="sasl_mechanism"):
        Producer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_SSL", sasl_mechanism="DIGEST-MD5")
    with pytest.raises(KafkaConfigError, match="sasl_plain_username"):
        Consumer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    with pytest.raises(KafkaConfigError, match="sasl_oauth_token_provider"):
        Admin(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")
    with pytest.raises(KafkaConfigError, match="ssl_context"):
        Producer(bootstrap_servers="127.0.0.1:1", security_protocol="SSL", ssl_context="/etc/ssl/ca.pem")
    with pytest.raises(NotYetSupportedError, match="GSSAPI"):
        Producer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")


def test_create_ssl_context_verifies_by_default(tmp_path: Path) -> None:
    context = create_ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert not create_ssl_context(check_hostname=False).check_hostname


async def test_hostname_mismatch_is_refused(tmp_path: Path, pki: Any) -> None:
    """A certificate from the trusted CA for another name fails hostname verification (broker_min serves it)."""
    broker = SecureBrokerMin(tmp_path / "data", pki, **{"ssl.keystore.location": pki.wrong_host_keystore})
    broker.start()
    try:
        config = client_config(broker, "SASL_SSL", "PLAIN")
        with pytest.raises(SSLVerificationError, match="127.0.0.1"):
            async with Producer(**config):
                pass
        config["ssl_context"] = create_ssl_context(cafile=pki.ca, check_hostname=False)
        async with Admin(**config) as admin:  # the chain is still verified, only the name is not
            await admin.describe_cluster()
    finally:
        broker.stop()


async def test_transactions_over_sasl_ssl(secure_broker: SecureBroker, topic: str) -> None:
    """One committed and one aborted transaction over SASL_SSL: read_committed sees only the first."""
    config = client_config(secure_broker, "SASL_SSL", "SCRAM-SHA-512")
    async with Producer(transactional_id=f"tx-{uuid.uuid4().hex[:8]}", **config) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(5):
                await producer.send(topic, f"kept-{i}".encode())
        try:
            async with producer.transaction():
                await producer.send(topic, b"dropped")
                raise RuntimeError("abort")
        except RuntimeError:
            pass
    values: list[bytes] = []
    async with Consumer(auto_offset_reset="earliest", isolation_level="read_committed", **config) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(values) < 5:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        await asyncio.sleep(1)
        for records in (await consumer.getmany(timeout_ms=500)).values():
            values.extend(r.value for r in records)
    assert values == [f"kept-{i}".encode() for i in range(5)]


async def test_a_topic_is_read_twice_from_the_start_over_tls(secure_broker: SecureBroker, topic: str) -> None:
    """Regression: broker_min served TLS fetches with asyncio's sendfile fallback, which reads from
    the segment file's shared position; a second read from offset 0 then got nothing and hung."""
    config = client_config(secure_broker, "SASL_SSL", "SCRAM-SHA-256")
    async with Producer(**config) as producer:
        await asyncio.gather(*[await producer.send(topic, b"x" * 1000, partition=0) for _ in range(200)])
    for _ in range(2):
        seen = 0
        async with Consumer(auto_offset_reset="earliest", **config) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            deadline = time.monotonic() + 15
            while seen < 200 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    seen += len(records)
        assert seen == 200
