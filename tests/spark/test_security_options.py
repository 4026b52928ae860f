"""Spark's Kafka connector security options -> kafkakit client settings, without Spark or a broker.

Certificates are generated here with ``cryptography``; every client the source and
sink construct is replaced by a stand-in that records its keyword arguments, to
check that each one gets the TLS/SASL settings built from the string options.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from kafkakit.errors import KafkaConfigError
from kafkakit.security.oauthbearer import validate_unsecured
from kafkakit.spark import reader, sink, source, two_phase
from kafkakit.spark.options import SourceOptions
from kafkakit.spark.security import SECURITY_KEYS, SecurityOptions, security_settings
from kafkakit.spark.sink import sink_config
from kafkakit.spark.source import Planner, parse_options
from pyspark.sql.types import StringType, StructField, StructType

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a-secret";'
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="b\\"q";'
OAUTH_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="carol";'
)
BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9"}


# -- certificates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    ca_pem: str
    ca: x509.Certificate
    client_cert: x509.Certificate
    client_key: ec.EllipticCurvePrivateKey
    directory: Path


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    directory = tmp_path_factory.mktemp("certs")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("kafkakit-test-ca", ca_key, "kafkakit-test-ca", ca_key, ca=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("spark-client", client_key, "kafkakit-test-ca", ca_key, ca=False)
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return Certs(str(ca_pem), ca, client, client_key, directory)


def _ca_subjects(context: ssl.SSLContext) -> list[Any]:
    return [cert["subject"] for cert in context.get_ca_certs()]


def _settings(**options: str) -> dict[str, Any]:
    """What the driver checks (from_options), then what an executor builds (client_kwargs)."""
    return SecurityOptions.from_options({f"kafka.{k}": v for k, v in options.items()}).client_kwargs()


# -- SASL ------------------------------------------------------------------------------------


def test_plaintext_by_default_adds_nothing() -> None:
    assert _settings() == {}
    assert security_settings({**BOOTSTRAP, "kafka.linger.ms": "5"}) == {}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_scram_credentials_come_from_the_jaas_line(mechanism: str, certs: Certs) -> None:
    settings = _settings(**{"security.protocol": "sasl_ssl", "sasl.mechanism": mechanism,
                            "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.location": certs.ca_pem})  # fmt: skip
    assert settings["security_protocol"] == "SASL_SSL"
    assert settings["sasl_mechanism"] == mechanism.upper()
    assert (settings["sasl_plain_username"], settings["sasl_plain_password"]) == ("alice", "a-secret")
    context = settings["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED  # https is the default
    assert ((("commonName", "kafkakit-test-ca"),),) in _ca_subjects(context)


def test_plain_over_sasl_plaintext_has_no_tls() -> None:
    settings = _settings(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                            "sasl.jaas.config": PLAIN_JAAS})  # fmt: skip
    assert settings == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "bob",
        "sasl_plain_password": 'b"q',
    }


def test_unsecured_oauthbearer_login_gives_a_token_provider() -> None:
    settings = _settings(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                            "sasl.jaas.config": OAUTH_JAAS})  # fmt: skip
    assert settings["sasl_mechanism"] == "OAUTHBEARER"
    token = settings["sasl_oauth_token_provider"]()
    assert validate_unsecured(token).principal == "carol"


def test_option_names_are_case_insensitive() -> None:
    settings = security_settings({"kafka.Security.Protocol": "SASL_PLAINTEXT", "KAFKA.SASL.MECHANISM": "PLAIN",
                                  "kafka.sasl.jaas.config": PLAIN_JAAS})  # fmt: skip
    assert settings["security_protocol"] == "SASL_PLAINTEXT" and settings["sasl_plain_username"] == "bob"


# -- TLS -------------------------------------------------------------------------------------


def test_empty_identification_algorithm_turns_hostname_checks_off(certs: Certs) -> None:
    settings = _settings(**{"security.protocol": "SSL", "ssl.truststore.location": certs.ca_pem,
                            "ssl.endpoint.identification.algorithm": ""})  # fmt: skip
    context = settings["ssl_context"]
    assert not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified
    https = _settings(**{"security.protocol": "SSL", "ssl.truststore.location": certs.ca_pem,
                         "ssl.endpoint.identification.algorithm": "HTTPS"})  # fmt: skip
    assert https["ssl_context"].check_hostname


def test_pkcs12_truststore(certs: Certs, tmp_path: Path) -> None:
    truststore = tmp_path / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [certs.ca], serialization.BestAvailableEncryption(b"ts-secret")))  # fmt: skip
    settings = _settings(**{"security.protocol": "SSL", "ssl.truststore.location": str(truststore),
                            "ssl.truststore.type": "pkcs12", "ssl.truststore.password": "ts-secret"})  # fmt: skip
    assert ((("commonName", "kafkakit-test-ca"),),) in _ca_subjects(settings["ssl_context"])
    with pytest.raises(KafkaConfigError) as caught:
        _settings(**{"security.protocol": "SSL", "ssl.truststore.location": str(truststore),
                     "ssl.truststore.type": "PKCS12", "ssl.truststore.password": "wrong"})  # fmt: skip
    assert caught.value.setting == "kafka.ssl.truststore.location"


@pytest.mark.parametrize("name", ["client.p12", "client.keystore"])  # PKCS12 by type, whatever the file name
def test_pkcs12_keystore(certs: Certs, tmp_path: Path, name: str) -> None:
    keystore = tmp_path / name
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", certs.client_key, certs.client_cert, [certs.ca],
        serialization.BestAvailableEncryption(b"ks-secret")))  # fmt: skip
    options = {"security.protocol": "SSL", "ssl.truststore.location": certs.ca_pem,
               "ssl.keystore.location": str(keystore), "ssl.keystore.type": "PKCS12"}  # fmt: skip
    assert isinstance(_settings(**options, **{"ssl.keystore.password": "ks-secret"})["ssl_context"], ssl.SSLContext)
    with pytest.raises(KafkaConfigError) as caught:
        _settings(**options, **{"ssl.keystore.password": "wrong"})
    assert caught.value.setting == "kafka.ssl.keystore.location"


def test_pem_keystore_holds_key_and_chain(certs: Certs, tmp_path: Path) -> None:
    keystore = tmp_path / "client.pem"
    keystore.write_bytes(
        certs.client_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"key-secret"))
        + certs.client_cert.public_bytes(serialization.Encoding.PEM)
        + certs.ca.public_bytes(serialization.Encoding.PEM)
    )  # fmt: skip
    options = {"security.protocol": "SSL", "ssl.truststore.location": certs.ca_pem,
               "ssl.keystore.location": str(keystore), "ssl.keystore.type": "PEM"}  # fmt: skip
    assert isinstance(_settings(**options, **{"ssl.key.password": "key-secret"})["ssl_context"], ssl.SSLContext)
    with pytest.raises(KafkaConfigError) as caught:
        _settings(**options, **{"ssl.key.password": "wrong"})
    assert caught.value.setting == "kafka.ssl.keystore.location"


# -- bad values name the option --------------------------------------------------------------

SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}


@pytest.mark.parametrize(
    ("options", "named", "reason"),
    [
        ({**SASL, "sasl.jaas.config": "not a jaas line"}, "kafka.sasl.jaas.config", "expected"),
        ({**SASL, "sasl.jaas.config": 'com.example.Login required user="x";'}, "kafka.sasl.jaas.config",
         "not supported"),  # fmt: skip
        ({**SASL, "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                      'username="u";'}, "kafka.sasl.jaas.config", "password"),  # fmt: skip
        ({**SASL, "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                      'username="u" password="p"'}, "kafka.sasl.jaas.config", "';'"),  # fmt: skip
        ({**SASL, "sasl.mechanism": "OAUTHBEARER",
          "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
         "kafka.sasl.jaas.config", "unsecuredLoginStringClaim_sub"),  # fmt: skip
        ({**SASL, "sasl.mechanism": "OAUTHBEARER",
          "sasl.jaas.config": OAUTH_JAAS[:-1] + ' unsecuredLoginLifetimeSeconds="soon";'},
         "kafka.sasl.jaas.config", "integer"),  # fmt: skip
        ({**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": PLAIN_JAAS}, "kafka.sasl.jaas.config",
         "OAuthBearerLoginModule"),  # fmt: skip
        ({**SASL, "sasl.jaas.config": OAUTH_JAAS}, "kafka.sasl.jaas.config", "ScramLoginModule"),
        ({**SASL}, "kafka.sasl.jaas.config", "required"),
        ({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS}, "kafka.sasl.mechanism", "GSSAPI"),
        ({**SASL, "sasl.mechanism": "SCRAM-SHA-1", "sasl.jaas.config": SCRAM_JAAS}, "kafka.sasl.mechanism",
         "SCRAM-SHA-1"),  # fmt: skip
        ({"security.protocol": "TLS"}, "kafka.security.protocol", "expected one of"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
         "kafka.ssl.endpoint.identification.algorithm", "https"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"},
         "kafka.ssl.truststore.location", "cannot load"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.truststore.location": "/x.p12", "ssl.truststore.type": "PKCS11"},
         "kafka.ssl.truststore.type", "PEM or PKCS12"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.keystore.location": "/x.jks", "ssl.keystore.type": "JKS"},
         "kafka.ssl.keystore.type", "keytool"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.keystore.location": "/nonexistent/client.pem"},
         "kafka.ssl.keystore.location", "cannot load"),  # fmt: skip
    ],
)
def test_bad_values_raise_naming_the_option(options: dict[str, str], named: str, reason: str) -> None:
    with pytest.raises(KafkaConfigError) as caught:
        parse_options({**BOOTSTRAP, "subscribe": "t", **{f"kafka.{k}": v for k, v in options.items()}})
    assert caught.value.setting == named
    assert reason in str(caught.value)
    # An executor building the settings from the same strings fails the same way.
    with pytest.raises(KafkaConfigError) as again:
        security_settings({f"kafka.{k}": v for k, v in options.items()})
    assert again.value.setting == named


def test_security_options_are_not_mapped_to_client_keywords() -> None:
    opts = SourceOptions({**BOOTSTRAP, **{f"kafka.{key}": "x" for key in SECURITY_KEYS}, "kafka.linger.ms": "5"})
    from kafkakit import Producer

    assert opts.client_settings(Producer) == {"linger_ms": 5}
    # A Java security setting kafkakit does not take is refused by name, not dropped.
    with pytest.raises(KafkaConfigError) as caught:
        SourceOptions({**BOOTSTRAP, "kafka.ssl.truststore.certificates": "x"}).client_settings(Producer)
    assert caught.value.setting == "kafka.ssl.truststore.certificates"


# -- strings travel, contexts are built on demand -------------------------------------------

SECURED = {
    **BOOTSTRAP,
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-256",
    "kafka.sasl.jaas.config": SCRAM_JAAS,
}
SCHEMA = StructType([StructField("value", StringType())])


def test_options_pickle_as_strings_and_settings_are_built_on_demand(certs: Certs) -> None:
    options = {**SECURED, "kafka.ssl.truststore.location": certs.ca_pem}
    source_config = parse_options({**options, "subscribe": "t"})
    sink_cfg = sink_config({**options, "topic": "t", "exactlyOnce": "true", "transactionalIdPrefix": "p"}, SCHEMA)
    assert sink_cfg.two_phase is not None
    for security in (source_config.fetch.security, sink_cfg.security, sink_cfg.two_phase.security):
        assert all(isinstance(v, str) for v in security.settings.values())
        assert security.settings["ssl.truststore.location"] == certs.ca_pem
    # What Spark ships to executors pickles; what it builds there would not.
    source_copy = pickle.loads(pickle.dumps(source_config))
    sink_copy = pickle.loads(pickle.dumps(sink_cfg))
    assert source_copy.fetch.security == source_config.fetch.security and sink_copy.security == sink_cfg.security
    built = source_copy.fetch.security.client_kwargs()
    with pytest.raises(TypeError):
        pickle.dumps(built["ssl_context"])
    # Each call builds a fresh context from the strings.
    again = sink_copy.security.client_kwargs()
    assert again["ssl_context"] is not built["ssl_context"]
    assert {k: v for k, v in again.items() if k != "ssl_context"} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice", "sasl_plain_password": "a-secret",
    }  # fmt: skip


# -- every client the source and sink build gets the settings --------------------------------


class _Built(Exception):
    """Raised by the stand-in clients once they have recorded their arguments."""


def _recorder(seen: list[dict[str, Any]]) -> Callable[..., Any]:
    def construct(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        raise _Built

    return construct


def _secured_kwargs(kwargs: dict[str, Any]) -> None:
    if "security" in kwargs:  # complete_transaction takes a SecurityConfig
        security = kwargs["security"]
        assert security.security_protocol == "SASL_SSL" and security.sasl_plain_username == "alice"
        assert isinstance(security.ssl_context, ssl.SSLContext)
    else:
        assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_plain_username"] == "alice"
        assert isinstance(kwargs["ssl_context"], ssl.SSLContext)


def test_every_client_is_built_with_the_security_settings(certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    options = {**SECURED, "kafka.ssl.truststore.location": certs.ca_pem}
    source_config = parse_options({**options, "subscribe": "t"})
    cfg = sink_config({**options, "topic": "t", "exactlyOnce": "true", "transactionalIdPrefix": "p"}, SCHEMA)
    tp = cfg.two_phase
    assert tp is not None
    seen: list[dict[str, Any]] = []
    record = _recorder(seen)
    for module, name in [(two_phase, "Admin"), (two_phase, "Consumer"), (two_phase, "Producer"),
                         (two_phase, "complete_transaction"), (sink, "Producer"), (source, "Admin"),
                         (source, "Consumer"), (reader, "Consumer")]:  # fmt: skip
        monkeypatch.setattr(module, name, record)
    handle: Any = object()
    attempts: list[Callable[[], Any]] = [
        lambda: asyncio.run(two_phase.ensure_control_topic(tp)),  # Admin
        lambda: asyncio.run(two_phase.read_control(tp)),  # Consumer
        lambda: asyncio.run(two_phase._write_control(tp, [])),  # Producer
        lambda: asyncio.run(two_phase.fence(tp, "p.0.0")),  # Producer
        lambda: asyncio.run(two_phase._commit_one(tp, handle)),  # complete_transaction
        lambda: asyncio.run(two_phase._abort_one(tp, handle)),  # complete_transaction
        lambda: sink._write_at_least_once(cfg, iter(()), None, 0, 0),  # Producer
        lambda: asyncio.run(Planner(source_config)._clients()),  # Admin (then Consumer)
        lambda: asyncio.run(reader._consumer_for(source_config.fetch)),  # Consumer
    ]
    for attempt in attempts:
        with pytest.raises(_Built):
            attempt()
    assert len(seen) == len(attempts)
    for kwargs in seen:
        _secured_kwargs(kwargs)
