"""Security options as Spark's Kafka connector takes them, turned into kafkakit client settings.

Users paste these from their Java configs::

    .option("kafka.security.protocol", "SASL_SSL")
    .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
    .option("kafka.sasl.jaas.config",
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";')
    .option("kafka.ssl.truststore.location", "/etc/kafka/ca.pem")

The options travel to executors as strings (:class:`SecurityOptions` pickles);
the ``ssl.SSLContext`` and token provider, which do not pickle, are built by
:meth:`SecurityOptions.client_kwargs` where each client is constructed.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkakit.errors import KafkaConfigError
from kafkakit.net.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, SecurityConfig

#: Java client settings handled here rather than mapped to a keyword one by one.
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_STORE_TYPES = ("PEM", "PKCS12")
#: kafkakit client keyword -> the data source option that sets it.
_OPTION_FOR = {
    "security_protocol": "kafka.security.protocol",
    "sasl_mechanism": "kafka.sasl.mechanism",
    "sasl_plain_username": "kafka.sasl.jaas.config",
    "sasl_plain_password": "kafka.sasl.jaas.config",
    "sasl_oauth_token_provider": "kafka.sasl.jaas.config",
    "ssl_context": "kafka.ssl.truststore.location",
}


@dataclass(frozen=True)
class SecurityOptions:
    """The ``kafka.*`` security options of one data source, as plain strings."""

    settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, values: Mapping[str, str]) -> SecurityOptions:
        """Pick the security options out of (lower-cased) data source options, and check them now."""
        options = cls(_pick(values))
        # Fail on the driver, naming the option, not later on an executor.
        try:
            SecurityConfig(**options.client_kwargs())
        except KafkaConfigError as exc:
            option = _OPTION_FOR.get(exc.setting, exc.setting)
            raise KafkaConfigError(option, str(exc).split(": ", 1)[-1]) from None
        return options

    def _get(self, name: str) -> str | None:
        value = self.settings.get(name)
        return value.strip() if value is not None and value.strip() else None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafkakit's Producer, Consumer, Admin or Cluster."""
        protocol = (self._get("security.protocol") or "PLAINTEXT").upper()
        kwargs: dict[str, Any] = {}
        if protocol == "PLAINTEXT" and not self.settings:
            return kwargs
        if protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(
                "kafka.security.protocol",
                f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}",
            )
        kwargs["security_protocol"] = protocol
        if protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = self._ssl_context()
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            kwargs.update(self._sasl())
        return kwargs

    def _sasl(self) -> dict[str, Any]:
        # Kafka's default mechanism is GSSAPI (Kerberos), which kafkakit does not speak.
        mechanism = (self._get("sasl.mechanism") or "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            hint = " (Kerberos, Kafka's default when unset)" if mechanism == "GSSAPI" else ""
            raise KafkaConfigError(
                "kafka.sasl.mechanism",
                f"{mechanism}{hint} is not supported; use one of {', '.join(SASL_MECHANISMS)}",
            )
        jaas_text = self._get("sasl.jaas.config")
        if jaas_text is None:
            raise KafkaConfigError(
                "kafka.sasl.jaas.config", f"is required with kafka.sasl.mechanism={mechanism}"
            )
        from kafkakit.security.jaas import parse_jaas_config

        try:
            entry = parse_jaas_config(jaas_text)
        except ValueError as exc:
            raise KafkaConfigError("kafka.sasl.jaas.config", str(exc)) from None
        kwargs: dict[str, Any] = {"sasl_mechanism": mechanism}
        oauth = mechanism == "OAUTHBEARER"
        if entry.login_module in (_PLAIN_MODULE, _SCRAM_MODULE, _OAUTH_MODULE) and oauth != (
            entry.login_module == _OAUTH_MODULE
        ):
            wanted = "OAuthBearerLoginModule" if oauth else "PlainLoginModule or ScramLoginModule"
            raise KafkaConfigError(
                "kafka.sasl.jaas.config", f"kafka.sasl.mechanism={mechanism} needs {wanted}"
            )
        if entry.login_module in (_PLAIN_MODULE, _SCRAM_MODULE):
            username, password = entry.options.get("username"), entry.options.get("password")
            if not username or not password:
                raise KafkaConfigError(
                    "kafka.sasl.jaas.config", f"{entry.login_module} needs username= and password="
                )
            kwargs.update(sasl_plain_username=username, sasl_plain_password=password)
        elif entry.login_module == _OAUTH_MODULE:
            kwargs["sasl_oauth_token_provider"] = _unsecured_provider(entry.options)
        else:
            raise KafkaConfigError(
                "kafka.sasl.jaas.config",
                f"login module {entry.login_module} is not supported; use PlainLoginModule, ScramLoginModule "
                "or OAuthBearerLoginModule (unsecured tokens)",
            )
        return kwargs

    def _ssl_context(self) -> ssl.SSLContext:
        from kafkakit.security import tls

        algorithm = self.settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        if algorithm not in ("", "https"):
            raise KafkaConfigError("kafka.ssl.endpoint.identification.algorithm", 'expected "https" or ""')
        cafile, cadata = None, None
        truststore = self._get("ssl.truststore.location")
        if truststore is not None:
            if self._store_type("ssl.truststore.type") == "PKCS12":
                cadata = self._read("ssl.truststore.location", tls.load_pkcs12_truststore_pem,
                                    truststore, self._get("ssl.truststore.password"))  # fmt: skip
            else:
                cafile = truststore
        try:
            context = tls.create_ssl_context(
                cafile=cafile, cadata=cadata, check_hostname=algorithm == "https"
            )
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise KafkaConfigError(
                "kafka.ssl.truststore.location", f"cannot load the CA certificates: {exc}"
            ) from None
        keystore = self._get("ssl.keystore.location")
        if keystore is not None:
            self._load_keystore(context, keystore)
        return context

    def _load_keystore(self, context: ssl.SSLContext, keystore: str) -> None:
        """The client certificate for mutual TLS: a PEM file holding key and chain, or a PKCS12 store."""
        from kafkakit.security import tls

        key_password = self._get("ssl.key.password")
        kind = self._store_type("ssl.keystore.type")
        try:
            if kind == "PEM":
                context.load_cert_chain(keystore, None, key_password)
                return
            # Python's ssl reads PEM only: convert in a private directory, whatever the file is named.
            directory = tempfile.mkdtemp(prefix="kafkakit-spark-tls-")
            try:
                password = self._get("ssl.keystore.password") or key_password
                cert, key = tls.pkcs12_to_pem_files(keystore, password, directory)
                context.load_cert_chain(cert, key)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise KafkaConfigError(
                "kafka.ssl.keystore.location", f"cannot load the client certificate: {exc}"
            ) from None

    def _store_type(self, name: str) -> str:
        kind = (self._get(name) or "PEM").upper()
        if kind == "JKS":
            raise KafkaConfigError(
                f"kafka.{name}",
                "JKS cannot be read from Python; convert it: keytool -importkeystore -srckeystore X.jks "
                "-destkeystore X.p12 -deststoretype PKCS12",
            )
        if kind not in _STORE_TYPES:
            raise KafkaConfigError(f"kafka.{name}", f"expected PEM or PKCS12, got {kind}")
        return kind

    @staticmethod
    def _read(name: str, loader: Callable[..., str], *args: Any) -> str:
        try:
            return loader(*args)
        except (OSError, ValueError) as exc:
            raise KafkaConfigError(f"kafka.{name}", f"cannot read it: {exc}") from None


def _pick(values: Mapping[str, str]) -> dict[str, str]:
    """The security options among data source options, keyed without ``kafka.`` (names case-insensitive)."""
    picked: dict[str, str] = {}
    for key, value in values.items():
        name = str(key).lower()
        if name.startswith("kafka.") and name[len("kafka.") :] in SECURITY_KEYS:
            picked[name[len("kafka.") :]] = str(value)
    return picked


def security_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """Security keyword arguments for a Producer, Consumer, Admin or Cluster, built now from string options.

    Call it where the client is constructed (on the executor): the result holds an
    ``ssl.SSLContext`` and possibly a token provider, neither of which pickles.
    """
    return SecurityOptions(_pick(options)).client_kwargs()


def _unsecured_provider(options: Mapping[str, str]) -> Callable[[], str]:
    """Kafka's unsecured OAUTHBEARER login (``unsecuredLoginStringClaim_sub``): for tests and dev clusters."""
    principal = options.get("unsecuredLoginStringClaim_sub")
    if not principal:
        raise KafkaConfigError(
            "kafka.sasl.jaas.config",
            "OAuthBearerLoginModule is supported with unsecuredLoginStringClaim_sub only",
        )
    raw_lifetime = options.get("unsecuredLoginLifetimeSeconds") or "3600"
    try:
        lifetime = int(raw_lifetime)
    except ValueError:
        raise KafkaConfigError(
            "kafka.sasl.jaas.config",
            f"unsecuredLoginLifetimeSeconds must be an integer, got {raw_lifetime!r}",
        ) from None

    def provider() -> str:
        from kafkakit.security.oauthbearer import unsecured_token

        return unsecured_token(principal, lifetime_seconds=lifetime)

    return provider
