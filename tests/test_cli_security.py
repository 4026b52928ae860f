"""``kafkakit users``/``acls`` and ``--command-config`` (Kafka's setting names) against secured broker_min and Kafka."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from tests.cli_helpers import kafkakit, ok
from tests.security_env import SecureBroker


def _sasl_properties(broker: SecureBroker, user: str, password: str) -> str:
    return (
        "# written by tests/test_cli_security.py\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{password}";\n'
        f"ssl.truststore.location={broker.pki.ca}\n"
        "ssl.truststore.type=PEM\n"
    )


def test_users_and_acls_over_sasl_ssl(secure_broker: SecureBroker, tmp_path: Path) -> None:
    bs = secure_broker.listener("SASL_SSL")
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text(_sasl_properties(secure_broker, "admin", "admin-secret"))
    as_admin = ("--bootstrap-server", bs, "--command-config", str(admin_config))
    suffix = uuid.uuid4().hex[:8]
    topic, other, user = f"cli-sec-{suffix}", f"cli-sec-other-{suffix}", f"carol{suffix}"
    for name in (topic, other):
        ok(kafkakit("topics", "create", *as_admin, "--topic", name, "--partitions", "1"))

    ok(
        kafkakit(
            "users",
            "add",
            *as_admin,
            "--user",
            user,
            "--mechanism",
            "SCRAM-SHA-256",
            "--password",
            "carol-pw",
        )
    )
    described = json.loads(ok(kafkakit("users", "describe", *as_admin, "--user", user, "--output", "json")))
    assert described == {user: [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}
    assert user in ok(kafkakit("users", "list", *as_admin))

    created = ok(kafkakit("acls", "create", *as_admin, "--allow-principal", f"User:{user}", "--operation", "Describe",
                          "--operation", "Read", "--topic", topic))  # fmt: skip
    assert "Created 2 ACL(s)" in created
    listed = json.loads(ok(kafkakit("acls", "list", *as_admin, "--topic", topic, "--output", "json")))
    assert sorted(a["operation"] for a in listed) == ["DESCRIBE", "READ"]
    assert {a["principal"] for a in listed} == {f"User:{user}"} and {a["pattern"] for a in listed} == {
        "LITERAL"
    }

    # The new user, from a TOML command config with the same (dotted) Kafka names.
    user_config = tmp_path / "carol.toml"
    user_config.write_text(
        'security.protocol = "SASL_SSL"\nsasl.mechanism = "SCRAM-SHA-256"\n'
        f'sasl.username = "{user}"\nsasl.password = "carol-pw"\nssl.ca.location = "{secure_broker.pki.ca}"\n'
    )
    as_user = ("--bootstrap-server", bs, "--command-config", str(user_config))
    deadline = time.monotonic() + 20
    while True:  # a new SCRAM credential reaches Kafka's authenticator through its metadata log
        result = kafkakit("topics", "describe", *as_user, "--topic", topic, "--output", "json")
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert json.loads(ok(result))[0]["topic"] == topic
    refused = kafkakit("topics", "describe", *as_user, "--topic", other)
    assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr

    deleted = ok(kafkakit("acls", "delete", *as_admin, "--allow-principal", f"User:{user}", "--topic", topic))
    assert "Deleted 2 ACL(s)" in deleted
    assert json.loads(ok(kafkakit("acls", "list", *as_admin, "--topic", topic, "--output", "json"))) == []
    ok(kafkakit("users", "delete", *as_admin, "--user", user, "--mechanism", "SCRAM-SHA-256"))
    assert user not in ok(kafkakit("users", "list", *as_admin))
    bad_password = tmp_path / "wrong.properties"
    bad_password.write_text(_sasl_properties(secure_broker, "admin", "not-the-password"))
    failed = kafkakit("topics", "list", "--bootstrap-server", bs, "--command-config", str(bad_password))
    assert failed.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in failed.stderr


def test_mutual_tls_with_a_pkcs12_keystore(secure_broker: SecureBroker, tmp_path: Path) -> None:
    config = tmp_path / "ssl.properties"
    config.write_text(
        "security.protocol=SSL\n"
        f"ssl.truststore.location={secure_broker.pki.ca}\n"
        f"ssl.keystore.location={secure_broker.pki.client_p12}\n"
        "ssl.keystore.type=PKCS12\nssl.keystore.password=p12-secret\n"
    )
    described = json.loads(
        ok(kafkakit("cluster", "describe", "--bootstrap-server", secure_broker.listener("SSL"),
                    "--command-config", str(config), "--output", "json"))
    )  # fmt: skip
    assert described["cluster_id"] and len(described["brokers"]) == 1
    jks = tmp_path / "jks.properties"
    jks.write_text("security.protocol=SSL\nssl.keystore.type=JKS\nssl.keystore.location=/x.jks\n")
    refused = kafkakit(
        "topics", "list", "--bootstrap-server", secure_broker.listener("SSL"), "--command-config", str(jks)
    )
    assert refused.returncode == 2 and "ssl.keystore.type" in refused.stderr
