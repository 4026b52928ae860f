"""kafkakit.spark over TLS and SASL: the options Spark's connector users already write.

Unit tests check how the options become client settings; one end-to-end test writes
exactly-once over SASL_SSL (SCRAM) to the secured broker_min and reads the topic back
through the source, so the settings reach the driver and the executors.
"""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafkakit.errors import KafkaConfigError
from kafkakit.spark.security import SecurityOptions
from kafkakit.spark.source import parse_options

from tests.security_env import USERS, Pki, SecureBrokerMin
from tests.spark.sink_support import create_topic_map, read_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a-secret";'
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="b\\"q";'


def _security(**options: str) -> dict[str, Any]:
    return SecurityOptions.from_options({f"kafka.{k}": v for k, v in options.items()}).client_kwargs()


def test_sasl_jaas_strings_become_credentials(pki: Pki) -> None:
    scram = _security(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.location": pki.ca})  # fmt: skip
    assert scram["security_protocol"] == "SASL_SSL" and scram["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (scram["sasl_plain_username"], scram["sasl_plain_password"]) == ("alice", "a-secret")
    assert isinstance(scram["ssl_context"], ssl.SSLContext) and scram["ssl_context"].check_hostname
    plain = _security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    assert (plain["sasl_plain_username"], plain["sasl_plain_password"]) == ("bob", 'b"q')
    assert "ssl_context" not in plain
    oauth = _security(**{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                            'unsecuredLoginStringClaim_sub="carol";',
    })  # fmt: skip
    token = oauth["sasl_oauth_token_provider"]()
    from kafkakit.security.oauthbearer import validate_unsecured

    assert validate_unsecured(token).principal == "carol"


def test_tls_stores_and_hostname_checks(pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509 import load_pem_x509_certificate

    ca = load_pem_x509_certificate(Path(pki.ca).read_bytes())
    truststore = tmp_path / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], serialization.BestAvailableEncryption(b"ts-secret")))  # fmt: skip
    settings = _security(**{
        "security.protocol": "SSL",
        "ssl.truststore.location": str(truststore), "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": "ts-secret",
        "ssl.keystore.location": pki.client_p12, "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "p12-secret",
        "ssl.endpoint.identification.algorithm": "",
    })  # fmt: skip
    context = settings["ssl_context"]
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert any(cert.get("subject") for cert in context.get_ca_certs())


@pytest.mark.parametrize(
    ("options", "named", "reason"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "kafka.sasl.jaas.config", "required"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
          "sasl.jaas.config": "com.example.Custom required;"}, "kafka.sasl.jaas.config", "not supported"),  # fmt: skip
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
          "sasl.jaas.config": "broken"}, "kafka.sasl.jaas.config", "expected"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks", "ssl.truststore.type": "JKS"},
         "kafka.ssl.truststore.type", "keytool"),  # fmt: skip
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
         "kafka.ssl.endpoint.identification.algorithm", "https"),  # fmt: skip
        ({"security.protocol": "TLS"}, "kafka.security.protocol", "expected one of"),
    ],
)
def test_bad_security_options_name_the_option(options: dict[str, str], named: str, reason: str) -> None:
    with pytest.raises(KafkaConfigError) as caught:
        parse_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t",
                       **{f"kafka.{k}": v for k, v in options.items()}})  # fmt: skip
    assert caught.value.setting == named
    assert reason in str(caught.value)


def test_options_pickle_and_the_context_is_built_where_used(pki: Pki) -> None:
    config = parse_options({
        "kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": SCRAM_JAAS,
        "kafka.ssl.truststore.location": pki.ca,
    })  # fmt: skip
    copy = pickle.loads(pickle.dumps(config))  # what Spark ships to executors
    assert copy.fetch.security == config.fetch.security
    assert isinstance(copy.fetch.security.client_kwargs()["ssl_context"], ssl.SSLContext)


def test_exactly_once_write_and_read_over_sasl_ssl(
    spark: SparkSession, secure_broker_min: SecureBrokerMin, topic: str
) -> None:
    broker = secure_broker_min
    create_topic_map(broker.listener("PLAINTEXT"), {topic: 2})
    secured = {
        "kafka.bootstrap.servers": broker.listener("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{USERS["admin"]}";',
        "kafka.ssl.truststore.location": broker.pki.ca,
    }
    df = spark.range(0, 300, numPartitions=3).selectExpr("cast(id as string) as value")
    writer = df.write.format("kafkakit").option("topic", topic).option("exactlyOnce", "true")
    for key, value in {**secured, "transactionalIdPrefix": topic}.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    committed = sorted(int(r.value) for r in read_topic(broker.listener("PLAINTEXT"), topic))
    assert committed == list(range(300))
    reader = spark.read.format("kafkakit").option("subscribe", topic)
    for key, value in secured.items():
        reader = reader.option(key, value)
    assert sorted(int(bytes(r.value).decode()) for r in reader.load().collect()) == list(range(300))
