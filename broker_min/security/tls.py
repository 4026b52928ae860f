"""The TLS side of a listener: its server context from Kafka's ``ssl.*`` settings, and mTLS principals.

Each ``ssl.*`` setting may be scoped to one listener as in Kafka
(``listener.name.<name>.ssl.keystore.location``), falling back to the global one.
Stores are PEM (a keystore file holds the PKCS#8 private key, optionally
encrypted with ``ssl.key.password``, followed by the certificate chain) or
PKCS12; JKS cannot be read from Python and is refused with the conversion to use.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.security.listeners import Listener
from kafkakit.broker.security.principal import ANONYMOUS, KafkaPrincipal
from kafkakit.errors import KafkaConfigError
from kafkakit.security import tls as tls_codecs

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_setting(config: BrokerConfig, listener: str, name: str) -> str | None:
    """A setting under Kafka's dotted ``name``: the listener's own value, else the global one."""
    scoped = config.listener_setting(listener, name)
    if scoped is not None:
        return scoped
    value = getattr(config, name.replace(".", "_"), None)
    return None if value is None else str(value)


def server_ssl_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of one SSL or SASL_SSL listener; KafkaConfigError names a bad setting."""
    def get(name: str) -> str | None:
        return listener_setting(config, listener.name, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(context, get("ssl.keystore.type") or "PEM", get("ssl.keystore.location"),
                   get("ssl.keystore.password"), get("ssl.key.password"), listener.name)  # fmt: skip
    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in _CLIENT_AUTH:
        raise KafkaConfigError("ssl.client.auth", f"expected none, requested or required, got {client_auth!r}")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    truststore = get("ssl.truststore.location")
    if truststore is not None:
        _load_truststore(context, get("ssl.truststore.type") or "PEM", truststore, get("ssl.truststore.password"))
    elif client_auth != "none":
        raise KafkaConfigError(
            "ssl.truststore.location", f"listener {listener.name} has ssl.client.auth={client_auth} but no truststore"
        )
    return context


def _load_keystore(
    context: ssl.SSLContext, kind: str, location: str | None, store_password: str | None,
    key_password: str | None, listener: str,
) -> None:  # fmt: skip
    if location is None:
        raise KafkaConfigError("ssl.keystore.location", f"listener {listener} uses TLS and needs a keystore")
    kind = kind.upper()
    try:
        if kind == "PEM":
            context.load_cert_chain(location, password=key_password)
        elif kind == "PKCS12":
            # ssl loads certificates only from files: convert to PEM in a private directory, load, delete.
            directory = tempfile.mkdtemp(prefix="kafkakit-keystore-")
            try:
                cert, key = tls_codecs.pkcs12_to_pem_files(location, store_password, directory)
                context.load_cert_chain(cert, key)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        else:
            raise KafkaConfigError("ssl.keystore.type", _unsupported_store(kind))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaConfigError("ssl.keystore.location", f"cannot load {kind} keystore {location}: {exc}") from exc


def _load_truststore(context: ssl.SSLContext, kind: str, location: str, password: str | None) -> None:
    kind = kind.upper()
    try:
        if kind == "PEM":
            context.load_verify_locations(cafile=location)
        elif kind == "PKCS12":
            context.load_verify_locations(cadata=tls_codecs.load_pkcs12_truststore_pem(location, password))
        else:
            raise KafkaConfigError("ssl.truststore.type", _unsupported_store(kind))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaConfigError("ssl.truststore.location", f"cannot load {kind} truststore {location}: {exc}") from exc


def _unsupported_store(kind: str) -> str:
    hint = " (convert it: keytool -importkeystore -srckeystore X.jks -destkeystore X.p12 -deststoretype PKCS12)"
    return f"{kind} is not supported; use PEM or PKCS12" + (hint if kind == "JKS" else "")


def peer_principal(ssl_object: ssl.SSLObject | None) -> KafkaPrincipal:
    """Kafka's default principal for a TLS client: ``User:<certificate DN, RFC 2253>``, else ANONYMOUS."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    from cryptography import x509

    return KafkaPrincipal("User", x509.load_der_x509_certificate(der).subject.rfc4514_string())
