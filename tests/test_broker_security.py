"""broker_min's authentication under bad input: each case closes one connection and nothing else.

Raw sockets speak to the secured broker_min of tests/security_env.py; after each
bad exchange a real kafkakit client must still work on the same broker.
"""

from __future__ import annotations

import asyncio
import json
import resource
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Producer
from kafkakit.errors import SaslAuthenticationError
from kafkakit.protocol import ApiKey
from kafkakit.security import oauthbearer
from kafkakit.security.plain import client_message

from tests.brokers import split_address
from tests.raw_protocol import RawClient, req
from tests.security_env import SecureBrokerMin, client_config

SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34


async def _still_serving(broker: SecureBrokerMin) -> None:
    """A correct SCRAM login over TLS still works, and so does the plaintext listener."""
    async with Admin(**client_config(broker, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        assert (await admin.describe_cluster()).brokers
    async with Admin(bootstrap_servers=broker.listener("PLAINTEXT")) as admin:
        assert (await admin.describe_cluster()).brokers


async def _closed(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    """Whether the broker closes the connection (EOF or reset) within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


async def _sasl_client(broker: SecureBrokerMin) -> RawClient:
    host, port = split_address(broker.listener("SASL_PLAINTEXT"))
    return RawClient(*await asyncio.open_connection(host, port))


async def test_plaintext_to_a_tls_port_is_closed(secure_broker_min: SecureBrokerMin) -> None:
    host, port = split_address(secure_broker_min.listener("SASL_SSL"))
    reader, writer = await asyncio.open_connection(host, port)
    raw = RawClient(reader, writer)
    writer.write(b"\x00\x00\x00\x10" + bytes(16))  # a Kafka frame, not a TLS record
    await writer.drain()
    assert await _closed(raw.reader)
    writer.close()
    await _still_serving(secure_broker_min)


async def test_tls_client_hello_to_a_plaintext_port_is_closed(secure_broker_min: SecureBrokerMin) -> None:
    host, port = split_address(secure_broker_min.listener("SASL_PLAINTEXT"))
    context = ssl.create_default_context(cafile=secure_broker_min.pki.ca)
    started = time.monotonic()
    with pytest.raises((ssl.SSLError, ConnectionError, TimeoutError, asyncio.IncompleteReadError)):
        async with asyncio.timeout(10):
            await asyncio.open_connection(host, port, ssl=context, server_hostname="127.0.0.1")
    assert time.monotonic() - started < 10
    await _still_serving(secure_broker_min)


async def test_garbage_sasl_bytes_fail_the_login_and_close(secure_broker_min: SecureBrokerMin) -> None:
    client = await _sasl_client(secure_broker_min)
    handshake = await client.call(req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    assert handshake.error_code == 0
    response = await client.call(req(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\xff\x00garbage"))
    assert response.error_code == SASL_AUTHENTICATION_FAILED
    assert await _closed(client.reader)
    client.close()
    await _still_serving(secure_broker_min)


async def test_sasl_authenticate_before_handshake_is_refused(secure_broker_min: SecureBrokerMin) -> None:
    client = await _sasl_client(secure_broker_min)
    client.writer.write(_frame(req(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client_message("admin", "admin-secret"))))
    body = await _read_frame(client.reader)
    # Either Kafka's ILLEGAL_SASL_STATE answer or a plain close; the connection must not authenticate.
    if body is not None:
        from kafkakit.protocol import decode_response

        _, response = decode_response(ApiKey.SASL_AUTHENTICATE, 2, body)
        assert response.error_code == ILLEGAL_SASL_STATE
    assert await _closed(client.reader)
    client.close()
    await _still_serving(secure_broker_min)


async def test_requests_before_authentication_close_the_connection(secure_broker_min: SecureBrokerMin) -> None:
    client = await _sasl_client(secure_broker_min)
    versions = await client.call(req(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    assert versions.error_code == 0  # ApiVersions is allowed before SASL, as in Kafka
    client.writer.write(_frame(req(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)))  # fmt: skip
    assert await _closed(client.reader)
    client.close()
    await _still_serving(secure_broker_min)


async def test_expired_token_is_refused(secure_broker_min: SecureBrokerMin) -> None:
    config = client_config(secure_broker_min, "SASL_SSL", "OAUTHBEARER")
    config["sasl_oauth_token_provider"] = lambda: oauthbearer.unsecured_token("admin", lifetime_seconds=-60)
    with pytest.raises(SaslAuthenticationError, match="expired"):
        async with Producer(**config):
            pass
    await _still_serving(secure_broker_min)


async def test_ten_thousand_failed_logins(tmp_path: Path, pki: Any) -> None:
    """10,000 wrong PLAIN passwords, 64 at a time, with no failed-login delay: every one is refused,
    no file descriptors leak, and the broker serves a correct login afterwards."""
    broker = SecureBrokerMin(tmp_path / "data", pki, **{"connection.failed.authentication.delay.ms": "0"})
    broker.start()
    try:
        fds_before = _open_fds()
        host, port = split_address(broker.listener("SASL_PLAINTEXT"))
        refused = 0
        semaphore = asyncio.Semaphore(64)

        async def one_failed_login() -> None:
            nonlocal refused
            async with semaphore:
                reader, writer = await asyncio.open_connection(host, port)
                client = RawClient(reader, writer)
                try:
                    await client.call(req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
                    response = await client.call(
                        req(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client_message("alice", "wrong"))
                    )
                    if response.error_code == SASL_AUTHENTICATION_FAILED and await _closed(reader):
                        refused += 1
                finally:
                    writer.close()

        started = time.monotonic()
        await asyncio.gather(*(one_failed_login() for _ in range(10_000)))
        elapsed = time.monotonic() - started
        assert refused == 10_000
        await _still_serving(broker)
        await asyncio.sleep(0.5)
        # The broker runs in this process: its sockets count too. Allow a little slack for pools.
        assert _open_fds() - fds_before < 50
        print(json.dumps({"failed_logins": refused, "seconds": round(elapsed, 1)}))
    finally:
        broker.stop()


def _open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir())) if Path("/proc/self/fd").exists() else resource.getrlimit(0)[0]


def _frame(payload: Any) -> bytes:
    from kafkakit.protocol import encode_request

    return encode_request(1, "raw-test", payload)


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        async with asyncio.timeout(5):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def test_signed_oauth_tokens_are_checked_against_a_jwks_file(tmp_path: Path, pki: Any) -> None:
    """With ``sasl.oauthbearer.jwks.endpoint.url`` set, only tokens signed by a listed key, for the
    expected audience and issuer, log in; the principal is the ``sub`` claim."""
    import base64

    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()

    def b64(value: int) -> str:
        return base64.urlsafe_b64encode(value.to_bytes((value.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "RSA", "kid": "k1", "n": b64(numbers.n), "e": b64(numbers.e)}]}))
    broker = SecureBrokerMin(
        tmp_path / "data",
        pki,
        **{
            "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            "sasl.oauthbearer.expected.audience": "kafka",
            "sasl.oauthbearer.expected.issuer": "https://issuer.example",
        },
    )
    broker.start()

    def token(signer: Any, **claims: Any) -> str:
        body = {"sub": "admin", "aud": "kafka", "iss": "https://issuer.example", "exp": time.time() + 300, **claims}
        return oauthbearer.sign_token(body, signer, kid="k1")

    async def login(value: str) -> None:
        config = client_config(broker, "SASL_SSL", "OAUTHBEARER")
        config["sasl_oauth_token_provider"] = lambda: value
        async with Admin(**config) as admin:
            await admin.describe_cluster()

    try:
        await login(token(key))
        for bad in (token(stranger), token(key, aud="other"), token(key, iss="https://evil.example"),
                    token(key, exp=time.time() - 600), oauthbearer.unsecured_token("admin")):  # fmt: skip
            with pytest.raises(SaslAuthenticationError):
                await login(bad)
        await login(token(key))  # still serving
    finally:
        broker.stop()


async def test_sasl_handshake_v0_then_bare_tokens(secure_broker_min: SecureBrokerMin) -> None:
    """Before KIP-152 a client sent SASL tokens as bare size-prefixed frames after SaslHandshake v0.
    broker_min advertises SaslHandshake 0-1 as Kafka does (librdkafka 2.0 looks for v0), so it serves v0."""
    client = await _sasl_client(secure_broker_min)
    handshake = await client.call(req(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
    assert handshake.error_code == 0
    token = client_message("admin", "admin-secret")
    client.writer.write(struct.pack(">i", len(token)) + token)
    (size,) = struct.unpack(">i", await asyncio.wait_for(client.reader.readexactly(4), 5))
    assert size == 0  # PLAIN's empty server token: authenticated
    metadata = await client.call(req(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False))  # fmt: skip
    assert metadata.brokers
    client.close()
    wrong = await _sasl_client(secure_broker_min)
    await wrong.call(req(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
    token = client_message("admin", "wrong")
    wrong.writer.write(struct.pack(">i", len(token)) + token)
    assert await _closed(wrong.reader)  # v0 has no error answer: the connection closes
    wrong.close()
