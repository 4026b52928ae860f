"""How a client secures its connections: ``security_protocol``, TLS and SASL settings.

:class:`SecurityConfig` carries the settings every connection of one client
uses (bootstrap, partition leaders, coordinators), validated once at
construction so a misconfigured client fails with a :class:`KafkaConfigError`
naming the setting before it opens a socket.  Setting names follow aiokafka's.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kafkakit.errors import KafkaConfigError, NotYetSupportedError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@runtime_checkable
class TokenProvider(Protocol):
    """aiokafka's ``AbstractTokenProvider`` shape: ``token()`` (sync or async), optional ``extensions()``."""

    def token(self) -> Any: ...


#: ``sasl_oauth_token_provider``: an object with ``token()`` as in aiokafka, or a callable,
#: sync or async, returning an :class:`~kafkakit.security.oauthbearer.OAuthBearerToken`,
#: a ``(token, lifetime_ms)`` pair or a bare token string.
OAuthTokenProvider = TokenProvider | Callable[[], Any] | Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SecurityConfig:
    """The security settings of one client (Producer, Consumer or Admin).

    - ``security_protocol``: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    - ``ssl_context``: used for ``SSL``/``SASL_SSL``; unset, a context trusting the
      system's CAs with hostname verification (see :func:`kafkakit.create_ssl_context`).
    - ``sasl_mechanism``: ``PLAIN`` (aiokafka's default), ``SCRAM-SHA-256``,
      ``SCRAM-SHA-512`` or ``OAUTHBEARER``.
    - ``sasl_plain_username`` / ``sasl_plain_password``: for PLAIN and SCRAM.
    - ``sasl_oauth_token_provider``: for OAUTHBEARER.
    - ``sasl_oauth_extensions``: SASL extensions (KIP-342) sent with every token,
      merged under the provider's own ``extensions()``.
    """

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None
    sasl_oauth_token_provider: OAuthTokenProvider | None = None
    sasl_oauth_extensions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        protocol = str(self.security_protocol).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(
                "security_protocol", f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {self.security_protocol!r}"
            )
        object.__setattr__(self, "security_protocol", protocol)
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise KafkaConfigError("ssl_context", f"expected an ssl.SSLContext, got {type(self.ssl_context).__name__}")
        if self.uses_ssl and self.ssl_context is None:
            from kafkakit.security.tls import create_ssl_context

            object.__setattr__(self, "ssl_context", create_ssl_context())
        if self.uses_sasl:
            self._check_sasl()

    def _check_sasl(self) -> None:
        mechanism = str(self.sasl_mechanism).upper()
        object.__setattr__(self, "sasl_mechanism", mechanism)
        if mechanism == "GSSAPI":
            raise NotYetSupportedError(
                "sasl_mechanism='GSSAPI' (Kerberos) is not supported by kafkakit; "
                f"use one of {', '.join(SASL_MECHANISMS)}"
            )
        if mechanism not in SASL_MECHANISMS:
            raise KafkaConfigError("sasl_mechanism", f"expected one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}")
        if mechanism == "OAUTHBEARER":
            provider = self.sasl_oauth_token_provider
            if provider is None:
                raise KafkaConfigError("sasl_oauth_token_provider", "required with sasl_mechanism='OAUTHBEARER'")
            if not (isinstance(provider, TokenProvider) or callable(provider)):
                raise KafkaConfigError(
                    "sasl_oauth_token_provider", "expected an object with token() or a callable returning a token"
                )
            return
        for name in ("sasl_plain_username", "sasl_plain_password"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise KafkaConfigError(name, f"required with sasl_mechanism={mechanism!r}")

    @property
    def uses_ssl(self) -> bool:
        """Whether connections start with a TLS handshake."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """Whether connections authenticate with SASL after ApiVersions."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        # Never print a password (a config repr ends up in logs and tracebacks).
        return (
            f"SecurityConfig(security_protocol={self.security_protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
            f"sasl_plain_username={self.sasl_plain_username!r})"
        )


#: The default: plaintext connections, no authentication.
PLAINTEXT = SecurityConfig()
