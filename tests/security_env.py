"""Secured brokers for tests: a per-session PKI, users, and both brokers with the same settings.

Both Apache Kafka and broker_min run four client listeners configured with the
same Kafka setting names:

- ``PLAINTEXT``: unauthenticated (principal ``User:ANONYMOUS``, a super user, so
  the harness can check readiness; never used by the ACL tests);
- ``SASL_PLAINTEXT`` and ``SASL_SSL``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
  OAUTHBEARER (unsecured JWS, Kafka's default validator);
- ``SSL``: mutual TLS; the principal is the client certificate's DN.

The authorizer is on (Kafka's StandardAuthorizer; broker_min accepts its class
name) with ``super.users=User:admin;User:ANONYMOUS`` and no allow-if-no-ACL, so
``alice`` and ``bob`` can do only what a test grants them.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.brokers import BrokerMinServer, BrokerSetupError, KafkaServer, free_port

#: name -> password; each has PLAIN and both SCRAM credentials on both brokers.
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SUPER_USERS = "User:admin;User:ANONYMOUS"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SECURE_LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL", "SSL")
CLIENT_DN = "CN=kafkakit-client,O=kafkakit"
REAUTH_MS = 3000
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class Pki:
    """A CA, a broker certificate for 127.0.0.1/localhost, a client certificate, and a stranger CA."""

    directory: Path

    @property
    def ca(self) -> str:
        return str(self.directory / "ca.pem")

    @property
    def broker_keystore(self) -> str:
        """PEM keystore as Kafka reads it: the PKCS#8 key followed by the certificate chain."""
        return str(self.directory / "broker-keystore.pem")

    @property
    def client_cert(self) -> str:
        return str(self.directory / "client.pem")

    @property
    def client_key(self) -> str:
        return str(self.directory / "client.key")

    @property
    def client_p12(self) -> str:
        """The client key and certificate as PKCS12, password ``p12-secret``."""
        return str(self.directory / "client.p12")

    @property
    def stranger_ca(self) -> str:
        """A CA that signed nothing the brokers use: trusting only it must fail verification."""
        return str(self.directory / "stranger-ca.pem")

    @property
    def wrong_host_keystore(self) -> str:
        """A keystore signed by the CA for the name ``wrong.example`` only."""
        return str(self.directory / "wrong-host-keystore.pem")

    @classmethod
    def create(cls, directory: Path) -> Pki:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        directory.mkdir(parents=True, exist_ok=True)
        pem = serialization.Encoding.PEM
        ca_key, ca_cert = _certificate("CN=kafkakit-test-ca", None, ca=True)
        stranger_key, stranger_cert = _certificate("CN=stranger-ca", None, ca=True)
        broker_key, broker_cert = _certificate("CN=localhost", (ca_key, ca_cert), names=("localhost", "127.0.0.1"))
        wrong_key, wrong_cert = _certificate("CN=wrong.example", (ca_key, ca_cert), names=("wrong.example",))
        client_key, client_cert = _certificate(CLIENT_DN, (ca_key, ca_cert), client=True)
        (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
        (directory / "stranger-ca.pem").write_bytes(stranger_cert.public_bytes(pem))
        (directory / "broker-keystore.pem").write_bytes(_pkcs8(broker_key) + broker_cert.public_bytes(pem))
        (directory / "wrong-host-keystore.pem").write_bytes(_pkcs8(wrong_key) + wrong_cert.public_bytes(pem))
        (directory / "client.pem").write_bytes(client_cert.public_bytes(pem))
        (directory / "client.key").write_bytes(_pkcs8(client_key))
        (directory / "client.p12").write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"client", client_key, client_cert, [ca_cert], serialization.BestAvailableEncryption(b"p12-secret")
            )
        )
        del stranger_key
        return cls(directory)


def _pkcs8(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _certificate(
    subject: str, issuer: tuple[Any, Any] | None, *, ca: bool = False, names: tuple[str, ...] = (), client: bool = False
) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name.from_rfc4514_string(subject)
    signing_key, issuer_name = (key, name) if issuer is None else (issuer[0], issuer[1].subject)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        alternatives: list[x509.GeneralName] = []
        for entry in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                alternatives.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return key, builder.sign(signing_key, hashes.SHA256())


def _jaas_users() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


def security_settings(pki: Pki, **overrides: str) -> dict[str, str]:
    """Kafka-named settings shared by both brokers (everything but the listener addresses)."""
    settings = {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.broker_keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca,
        "listener.name.ssl.ssl.client.auth": "required",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": SUPER_USERS,
        "allow.everyone.if.no.acl.found": "false",
        # SASL_PLAINTEXT leaves SCRAM-SHA-256 out, so a client asking for it meets an unsupported mechanism.
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        # KIP-368: OAUTHBEARER sessions on SASL_PLAINTEXT last 3 s, so long tests re-authenticate.
        "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": str(REAUTH_MS),
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        settings[f"listener.name.{listener}.plain.sasl.jaas.config"] = _jaas_users()
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        settings[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="admin";'
        )
    settings.update(overrides)
    return settings


def add_scram_specs() -> list[str]:
    """``--add-scram`` entries for every user and both SCRAM mechanisms (kafka-storage's form)."""
    return [
        f"{mechanism}=[name={name},password={password}]"
        for name, password in USERS.items()
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    ]


class SecureKafkaServer(KafkaServer):
    """Apache Kafka with the four client listeners, SCRAM users added at format time."""

    def __init__(self, work_dir: Path, pki: Pki, **overrides: str) -> None:
        super().__init__(work_dir)
        self.pki = pki
        self.overrides = overrides
        self.secure_ports: dict[str, int] = {}

    def listener(self, name: str) -> str:
        return f"127.0.0.1:{self.secure_ports[name]}"

    def server_properties(self) -> dict[str, str]:
        props = super().server_properties()
        addresses = {"PLAINTEXT": self.port, **self.secure_ports}
        client = ",".join(f"{name}://127.0.0.1:{port}" for name, port in addresses.items())
        props["listeners"] = f"{client},CONTROLLER://127.0.0.1:{self.controller_port}"
        props["advertised.listeners"] = client
        props["listener.security.protocol.map"] = (
            ",".join(f"{name}:{name}" for name in addresses) + ",CONTROLLER:PLAINTEXT"
        )
        props.update(security_settings(self.pki, **self.overrides))
        return props

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        if main_class == "kafka.tools.StorageTool":  # format: add the SCRAM users, as in production
            args = (*args, *(arg for spec in add_scram_specs() for arg in ("--add-scram", spec)))
        return super()._java_command(main_class, *args)

    def _launch_and_wait(self) -> None:
        taken: set[int] = set()
        for name in SECURE_LISTENERS:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            self.secure_ports[name] = port
        super()._launch_and_wait()


class SecureBrokerMin(BrokerMinServer):
    """broker_min in this process with the four client listeners on free ports."""

    def __init__(self, data_dir: Path, pki: Pki, **overrides: str) -> None:
        listeners = ",".join(f"{name}://127.0.0.1:0" for name in ("PLAINTEXT", *SECURE_LISTENERS))
        from kafkakit.broker.cli import parse_settings

        settings = {
            "listeners": listeners,
            "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in ("PLAINTEXT", *SECURE_LISTENERS)),
            **security_settings(pki, **overrides),
        }
        # Parsed as the command line parses --config, so values are typed as Kafka's strings would be.
        config = parse_settings([f"{key}={value}" for key, value in settings.items()])
        super().__init__(data_dir, add_scram=add_scram_specs(), **config)
        self.pki = pki

    def listener(self, name: str) -> str:
        if name not in self.listeners:
            raise BrokerSetupError(f"broker_min has no listener {name}")
        return self.listeners[name]


SecureBroker = SecureKafkaServer | SecureBrokerMin


def client_config(
    broker: SecureBroker, listener: str = "SASL_SSL", mechanism: str = "SCRAM-SHA-256", user: str = "admin",
    password: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``bootstrap_servers`` and security keyword arguments for a kafkakit client as ``user``.

    ``listener="SSL"`` authenticates with the client certificate (principal :data:`CLIENT_DN`).
    """
    from kafkakit.security.oauthbearer import unsecured_token
    from kafkakit.security.tls import create_ssl_context

    pki = broker.pki
    config: dict[str, Any] = {"bootstrap_servers": broker.listener(listener), "security_protocol": listener}
    if listener == "SSL":
        config["ssl_context"] = create_ssl_context(cafile=pki.ca, certfile=pki.client_cert, keyfile=pki.client_key)
        return config
    if listener == "SASL_SSL":
        config["ssl_context"] = create_ssl_context(cafile=pki.ca)
    config["sasl_mechanism"] = mechanism
    if mechanism == "OAUTHBEARER":
        config["sasl_oauth_token_provider"] = lambda: unsecured_token(user)
    else:
        config["sasl_plain_username"] = user
        config["sasl_plain_password"] = USERS[user] if password is None else password
    return config


def pki_for_session(directory: Path) -> Iterator[Pki]:
    """A fresh PKI in ``directory``, removed afterwards."""
    pki = Pki.create(directory)
    try:
        yield pki
    finally:
        shutil.rmtree(directory, ignore_errors=True)
