"""SASL on the broker: each SASL listener's mechanisms, and one connection's authentication state.

:class:`ListenerSecurity` is built once per listener at start-up from Kafka's
settings (so a bad JAAS string or key file stops the broker before it serves):
the enabled mechanisms, PLAIN users from
``listener.name.<name>.plain.sasl.jaas.config``, and the OAUTHBEARER validator.

:class:`SaslConnection` follows Kafka's ``SaslServerAuthenticator``: before
authentication only ApiVersions, SaslHandshake (v1; v0 tokens-as-frames is not
served) and SaslAuthenticate are accepted; a failure answers with
SASL_AUTHENTICATION_FAILED and the same message whether the user is unknown or
the password wrong.  A successful exchange yields the principal and, with
``connections.max.reauth.ms`` or an expiring token, a session lifetime
(KIP-368): the connection must re-authenticate (SaslHandshake again) before it
ends, or it is closed at its next request.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.security.listeners import Listener
from kafkakit.broker.security.principal import KafkaPrincipal
from kafkakit.errors import KafkaConfigError
from kafkakit.security import jaas, oauthbearer, plain, scram

NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
MIN_REAUTH_INTERVAL_S = 1.0
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_FAILED = "Authentication failed: Invalid username or password"

ScramLookup = Callable[[str, str], "scram.ScramCredential | None"]


@dataclass(frozen=True, slots=True)
class OAuthValidator:
    """How OAUTHBEARER tokens are checked: unsecured JWS (Kafka's default) or signed against keys."""

    keys: oauthbearer.JwkSet | None
    principal_claim: str
    scope_claim: str
    required_scope: tuple[str, ...]
    audience: tuple[str, ...]
    issuer: str | None
    clock_skew_ms: int

    def validate(self, token: str) -> oauthbearer.ValidatedToken:
        if self.keys is None:
            return oauthbearer.validate_unsecured(
                token,
                required_scope=self.required_scope,
                principal_claim=self.principal_claim,
                scope_claim=self.scope_claim,
                allowable_clock_skew_ms=self.clock_skew_ms,
            )
        return oauthbearer.validate_signed(
            token,
            self.keys,
            expected_audience=self.audience,
            expected_issuer=self.issuer,
            principal_claim=self.principal_claim,
            scope_claim=self.scope_claim,
            allowable_clock_skew_ms=self.clock_skew_ms,
        )


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """The SASL configuration of one listener."""

    listener: Listener
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth: OAuthValidator | None = None
    max_reauth_ms: int = 0
    failed_auth_delay_ms: int = 100
    #: ``listener.name.<l>.<mechanism>.connections.max.reauth.ms`` overrides, by mechanism (as in Kafka)
    reauth_ms_by_mechanism: dict[str, int] = field(default_factory=dict)

    def reauth_ms(self, mechanism: str | None) -> int:
        return self.reauth_ms_by_mechanism.get(mechanism or "", self.max_reauth_ms)

    @classmethod
    def build(cls, config: BrokerConfig, listener: Listener) -> ListenerSecurity:
        """Read and check this listener's SASL settings (KafkaConfigError names a bad one)."""
        if not listener.uses_sasl:
            return cls(listener, failed_auth_delay_ms=config.connection_failed_authentication_delay_ms)
        mechanisms = _enabled_mechanisms(config, listener)
        plain_users = _plain_users(config, listener) if "PLAIN" in mechanisms else {}
        oauth = _oauth_validator(config, listener) if "OAUTHBEARER" in mechanisms else None
        return cls(
            listener,
            mechanisms,
            plain_users,
            oauth,
            _listener_int(config, listener, "connections.max.reauth.ms", config.connections_max_reauth_ms),
            config.connection_failed_authentication_delay_ms,
            {
                mechanism: limit
                for mechanism in mechanisms
                if (limit := _listener_int(config, listener, f"{mechanism.lower()}.connections.max.reauth.ms", -1)) >= 0
            },
        )


def _listener_int(config: BrokerConfig, listener: Listener, key: str, default: int) -> int:
    value = config.listener_setting(listener.name, key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise KafkaConfigError(f"listener.name.{listener.name.lower()}.{key}", f"expected a number, got {value!r}") from None


def _enabled_mechanisms(config: BrokerConfig, listener: Listener) -> tuple[str, ...]:
    text = config.listener_setting(listener.name, "sasl.enabled.mechanisms") or config.sasl_enabled_mechanisms
    if text is None:
        raise KafkaConfigError(
            "sasl.enabled.mechanisms",
            f"listener {listener.name} is {listener.security_protocol}: set the mechanisms to enable "
            f"({', '.join(SUPPORTED_MECHANISMS)}); Kafka's default, GSSAPI, is not supported",
        )
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise KafkaConfigError(
            "sasl.enabled.mechanisms",
            f"unsupported {', '.join(unsupported) or 'empty list'}; broker_min supports {', '.join(SUPPORTED_MECHANISMS)}",
        )
    return mechanisms


def _jaas_options(config: BrokerConfig, listener: Listener, mechanism: str) -> dict[str, str] | None:
    key = f"{mechanism.lower()}.sasl.jaas.config"
    text = config.listener_setting(listener.name, key)
    if text is None:
        return None
    try:
        return dict(jaas.parse_jaas_config(text).options)
    except ValueError as exc:
        raise KafkaConfigError(f"listener.name.{listener.name.lower()}.{key}", str(exc)) from exc


def _plain_users(config: BrokerConfig, listener: Listener) -> dict[str, str]:
    options = _jaas_options(config, listener, "PLAIN")
    if options is None:
        raise KafkaConfigError(
            f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config",
            'PLAIN is enabled but no users are configured: give PlainLoginModule options user_<name>="<password>"',
        )
    return {name[len("user_") :]: password for name, password in options.items() if name.startswith("user_")}


def _oauth_validator(config: BrokerConfig, listener: Listener) -> OAuthValidator:
    options = _jaas_options(config, listener, "OAUTHBEARER") or {}
    url = config.listener_setting(listener.name, "sasl.oauthbearer.jwks.endpoint.url") or (
        config.sasl_oauthbearer_jwks_endpoint_url
    )
    keys = _load_keys(url) if url else None
    audience = config.sasl_oauthbearer_expected_audience
    if keys is None:  # the unsecured validator takes its options from the JAAS line, as in Kafka
        return OAuthValidator(
            None,
            options.get("unsecuredValidatorPrincipalClaimName", "sub"),
            options.get("unsecuredValidatorScopeClaimName", "scope"),
            tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            (),
            None,
            int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0),
        )
    return OAuthValidator(
        keys,
        config.sasl_oauthbearer_sub_claim_name,
        config.sasl_oauthbearer_scope_claim_name,
        (),
        tuple(a.strip() for a in audience.split(",") if a.strip()) if audience else (),
        config.sasl_oauthbearer_expected_issuer,
        config.sasl_oauthbearer_clock_skew_seconds * 1000,
    )


def _load_keys(url: str) -> oauthbearer.JwkSet:
    """A JWKS file (``file:`` URL or path) or a PEM public key; remote URLs would need the network."""
    setting = "sasl.oauthbearer.jwks.endpoint.url"
    if url.startswith(("http://", "https://")):
        raise KafkaConfigError(setting, "broker_min reads keys from a file: give a file: URL or a path")
    path = Path(url.removeprefix("file://").removeprefix("file:"))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KafkaConfigError(setting, f"cannot read {path}: {exc}") from exc
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return oauthbearer.JwkSet.from_pem_public_key(data)
        return oauthbearer.JwkSet.from_file(str(path))
    except (ValueError, KeyError) as exc:
        raise KafkaConfigError(setting, f"{path} is not a JWKS file or PEM public key: {exc}") from exc


@dataclass(slots=True)
class SaslReply:
    """What one SASL request is answered with."""

    error_code: int
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    mechanisms: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.error_code != NONE


class SaslConnection:
    """One connection's SASL state: handshake, exchange, principal, session expiry."""

    def __init__(self, security: ListenerSecurity, scram_lookup: ScramLookup) -> None:
        self.security = security
        self._scram_lookup = scram_lookup
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._exchange: _Exchange | None = None
        self._handshaken = False
        #: Monotonic time the session ends (None: never).
        self.expires_at: float | None = None
        self._last_start = 0.0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def in_progress(self) -> bool:
        """Between a SaslHandshake and the end of its exchange (first time or re-authentication)."""
        return self._handshaken

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (time.monotonic() if now is None else now) >= self.expires_at

    def handshake(self, mechanism: str) -> SaslReply:
        enabled = self.security.mechanisms
        if self._handshaken:
            return SaslReply(ILLEGAL_SASL_STATE, "SaslHandshake received twice", mechanisms=enabled)
        if mechanism not in enabled:
            return SaslReply(UNSUPPORTED_SASL_MECHANISM, f"Unsupported SASL mechanism {mechanism}", mechanisms=enabled)
        now = time.monotonic()
        if self.authenticated and now - self._last_start < MIN_REAUTH_INTERVAL_S:
            # Kafka's SocketServer: at most one re-authentication a second; the request is then
            # handled as on any authenticated connection (ILLEGAL_SASL_STATE), the session goes on.
            return SaslReply(ILLEGAL_SASL_STATE, "re-authentication less than a second after the last", mechanisms=enabled)
        if self.authenticated and mechanism != self.mechanism:
            # KIP-368: a session is renewed with the mechanism it started with.
            return SaslReply(
                UNSUPPORTED_SASL_MECHANISM,
                f"re-authentication must use {self.mechanism}, not {mechanism}",
                mechanisms=enabled,
            )
        self._handshaken = True
        self._last_start = now
        self.mechanism = mechanism
        self._exchange = self._new_exchange(mechanism)
        return SaslReply(NONE, mechanisms=enabled)

    def _new_exchange(self, mechanism: str) -> _Exchange:
        if mechanism == "PLAIN":
            return _PlainExchange(self.security.plain_users)
        if mechanism == "OAUTHBEARER":
            assert self.security.oauth is not None
            return _OAuthExchange(self.security.oauth)
        return _ScramExchange(mechanism, self._scram_lookup)

    def authenticate(self, auth_bytes: bytes) -> SaslReply:
        """One SaslAuthenticate round; a failed reply ends the connection after its delay."""
        exchange = self._exchange
        if exchange is None:
            return SaslReply(ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake")
        try:
            response = exchange.step(auth_bytes)
        except _AuthFailed as exc:
            self._exchange = None
            return SaslReply(SASL_AUTHENTICATION_FAILED, str(exc))
        if not exchange.complete:
            return SaslReply(NONE, auth_bytes=response)
        principal = KafkaPrincipal("User", exchange.username)
        if self.principal is not None and principal != self.principal:
            self._exchange = None
            return SaslReply(SASL_AUTHENTICATION_FAILED, "re-authentication must not change the principal")
        self.principal = principal
        self._exchange = None
        self._handshaken = False
        lifetime = self._session_lifetime_ms(exchange.credential_expiry_ms)
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else None
        return SaslReply(NONE, auth_bytes=response, session_lifetime_ms=lifetime)

    def _session_lifetime_ms(self, credential_expiry_ms: int | None) -> int:
        """min(connections.max.reauth.ms, time left on the credential), as Kafka computes it; 0 = none."""
        limits = []
        max_reauth_ms = self.security.reauth_ms(self.mechanism)
        if max_reauth_ms > 0:
            limits.append(max_reauth_ms)
        if credential_expiry_ms is not None:
            limits.append(max(1, credential_expiry_ms - int(time.time() * 1000)))
        return min(limits) if limits else 0


class _AuthFailed(Exception):
    """The exchange failed; the message is what the client is told."""


class _Exchange:
    username = ""
    complete = False
    credential_expiry_ms: int | None = None

    def step(self, data: bytes) -> bytes:
        raise NotImplementedError


class _PlainExchange(_Exchange):
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users

    def step(self, data: bytes) -> bytes:
        try:
            authzid, username, password = plain.parse_client_message(data)
        except ValueError as exc:
            raise _AuthFailed(f"Authentication failed: {exc}") from None
        expected = self._users.get(username)
        # Compare against something even for an unknown user: the answer and its timing must
        # not reveal which users exist.
        matches = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not matches:
            raise _AuthFailed(_FAILED)
        if authzid and authzid != username:
            raise _AuthFailed("Authentication failed: Client requested an authorization id that is different from username")
        self.username = username
        self.complete = True
        return b""


class _ScramExchange(_Exchange):
    def __init__(self, mechanism: str, lookup: ScramLookup) -> None:
        self._server = scram.ScramServer(mechanism, lambda user: lookup(mechanism, user))
        self._mechanism = mechanism
        self._first_done = False

    def step(self, data: bytes) -> bytes:
        generic = (
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            + self._mechanism
        )
        try:
            if not self._first_done:
                self._first_done = True
                return self._server.handle_client_first(data)
            reply = self._server.handle_client_final(data)
        except Exception:  # noqa: BLE001 - malformed or wrong: the client learns only that it failed
            raise _AuthFailed(generic) from None
        self.username = self._server.username
        self.complete = True
        return reply


class _OAuthExchange(_Exchange):
    def __init__(self, validator: OAuthValidator) -> None:
        self._validator = validator
        self._error: str | None = None

    def step(self, data: bytes) -> bytes:
        if self._error is not None:
            # The client acknowledged our error challenge with a lone separator (RFC 7628 3.2.3).
            raise _AuthFailed(f"Authentication failed: {self._error}")
        try:
            token, _extensions, _authzid = oauthbearer.parse_client_initial_response(data)
            validated = self._validator.validate(token)
        except Exception as exc:  # noqa: BLE001 - whatever an unauthenticated token does, it is refused
            self._error = str(exc)
            return oauthbearer.error_challenge("invalid_token")
        self.username = validated.principal
        self.credential_expiry_ms = validated.lifetime_ms
        self.complete = True
        return b""
