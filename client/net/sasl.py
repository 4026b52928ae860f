"""SASL on a client connection: SaslHandshake v1, then SaslAuthenticate rounds (KIP-152).

:class:`SaslAuthenticator` is shared by every connection of one client.  It
runs the exchange of the configured mechanism and returns the session lifetime
the broker granted (KIP-368), after which the connection re-authenticates.
The mechanism codecs live in :mod:`kafkakit.security`; this module only drives
them over the wire and turns failures into typed errors naming the mechanism
and the broker.  OAUTHBEARER tokens are cached here and refreshed at 80% of
their lifetime (Java's ``sasl.login.refresh.window.factor``), so connections
opened late in a token's life never present one about to expire.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from kafkakit.errors import (
    IllegalSaslStateError,
    KafkaConfigError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
    for_code,
)
from kafkakit.net.security import SecurityConfig, TokenProvider
from kafkakit.protocol.framing import ApiKey
from kafkakit.security import oauthbearer, plain, scram

_UNSUPPORTED_SASL_MECHANISM = 33
_ILLEGAL_SASL_STATE = 34
#: Refresh an OAUTHBEARER token once this share of its lifetime has passed (Java's default).
REFRESH_WINDOW_FACTOR = 0.8
#: ... and at the latest this many seconds before it expires: a session can last no longer than
#: its token, and brokers refuse re-authenticating more than once a second.
REFRESH_BUFFER_S = 3.0


class SaslChannel(Protocol):
    """What the authenticator needs of a connection: one request/response round trip."""

    host: str
    port: int
    node_id: int

    async def sasl_call(self, api_key: int, **fields: Any) -> Any: ...


class _Mechanism(Protocol):
    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None:
        """The next message to send, or None when the exchange is complete."""
        ...


class _Plain:
    def __init__(self, username: str, password: str) -> None:
        self._message = plain.client_message(username, password)

    def first(self) -> bytes:
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        return None  # the broker's empty answer means success


class _Scram:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._client = scram.ScramClient(mechanism, username, password)
        self._sent_final = False

    def first(self) -> bytes:
        return self._client.first_message()

    def step(self, challenge: bytes) -> bytes | None:
        if not self._sent_final:
            self._sent_final = True
            return self._client.final_message(challenge)
        # The server proves it knows the credential too: a broker that cannot is an impostor.
        self._client.verify_server_final(challenge)
        return None


class _OAuthBearer:
    def __init__(self, token: oauthbearer.OAuthBearerToken, extensions: Mapping[str, str]) -> None:
        self._message = oauthbearer.client_initial_response(token.value, extensions)
        self.server_error: str | None = None

    def first(self) -> bytes:
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        if not challenge:
            return None
        # A non-empty challenge is the server's JSON error (RFC 7628 3.2.2); the client
        # acknowledges with a lone separator and the server then fails the exchange.
        self.server_error = challenge.decode("utf-8", "replace")
        return b"\x01"


class SaslAuthenticator:
    """Authenticates connections with one client's SASL settings."""

    def __init__(self, security: SecurityConfig) -> None:
        self.security = security
        self.mechanism = security.sasl_mechanism
        self._tokens = _TokenCache(security) if self.mechanism == "OAUTHBEARER" else None

    async def authenticate(self, channel: SaslChannel) -> int:
        """Run the handshake and exchange on ``channel``; return the session lifetime in ms (0 = none)."""
        where = f"broker {channel.node_id} at {channel.host}:{channel.port}" if channel.node_id >= 0 else (
            f"broker at {channel.host}:{channel.port}"
        )
        await self._handshake(channel, where)
        mechanism = await self._mechanism()
        message: bytes | None = mechanism.first()
        lifetime_ms = 0
        try:
            while message is not None:
                response = await channel.sasl_call(ApiKey.SASL_AUTHENTICATE, auth_bytes=message)
                code = int(response.error_code)
                if code:
                    detail = response.error_message or for_code(code).__name__
                    if isinstance(mechanism, _OAuthBearer) and mechanism.server_error:
                        detail += f" (server said {mechanism.server_error})"
                    raise for_code(code)(f"{self.mechanism} authentication to {where} failed: {detail}")
                lifetime_ms = _lifetime_ms(response)
                message = mechanism.step(bytes(response.auth_bytes))
        except ValueError as exc:  # the mechanism codec refused what the server sent
            raise SaslAuthenticationError(f"{self.mechanism} authentication to {where} failed: {exc}") from exc
        return lifetime_ms

    async def _handshake(self, channel: SaslChannel, where: str) -> None:
        response = await channel.sasl_call(ApiKey.SASL_HANDSHAKE, mechanism=self.mechanism)
        code = int(response.error_code)
        if code == _UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(response.mechanisms) or "none"
            raise UnsupportedSaslMechanismError(
                f"{where} does not enable SASL mechanism {self.mechanism}; it enables: {enabled}"
            )
        if code == _ILLEGAL_SASL_STATE:
            raise IllegalSaslStateError(f"SaslHandshake to {where}")
        if code:
            raise for_code(code)(f"SaslHandshake for {self.mechanism} to {where}")

    async def _mechanism(self) -> _Mechanism:
        security = self.security
        if self._tokens is not None:
            token, extensions = await self._tokens.current()
            return _OAuthBearer(token, extensions)
        assert security.sasl_plain_username is not None and security.sasl_plain_password is not None
        if self.mechanism == "PLAIN":
            return _Plain(security.sasl_plain_username, security.sasl_plain_password)
        return _Scram(self.mechanism, security.sasl_plain_username, security.sasl_plain_password)


def _lifetime_ms(response: Any) -> int:
    lifetime = getattr(response, "session_lifetime", None)
    if lifetime is None:
        return 0
    return max(0, int(lifetime.total_seconds() * 1000))


class _TokenCache:
    """The current OAUTHBEARER token of one client, fetched from its provider and refreshed early."""

    def __init__(self, security: SecurityConfig) -> None:
        self._provider = security.sasl_oauth_token_provider
        self._extensions = dict(security.sasl_oauth_extensions)
        self._token: oauthbearer.OAuthBearerToken | None = None
        self._token_extensions: dict[str, str] = {}
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()

    async def current(self) -> tuple[oauthbearer.OAuthBearerToken, dict[str, str]]:
        async with self._lock:
            if self._token is None or time.time() >= self._refresh_at:
                await self._fetch()
            assert self._token is not None
            return self._token, self._token_extensions

    async def _fetch(self) -> None:
        provider = self._provider
        extensions = dict(self._extensions)
        if isinstance(provider, TokenProvider):
            result = provider.token()
            provided = getattr(provider, "extensions", None)
            if callable(provided):
                more = provided()
                if inspect.isawaitable(more):
                    more = await more
                extensions.update(more or {})
        else:
            assert callable(provider)
            result = provider()
        if inspect.isawaitable(result):
            result = await result
        token = _as_token(result)
        extensions.update(token.extensions)
        now = time.time()
        lifetime_s = token.lifetime_ms / 1000 - now
        if lifetime_s <= 0 and token.lifetime_ms > 0:
            raise SaslAuthenticationError("sasl_oauth_token_provider returned a token that has already expired")
        # A token of unknown lifetime is fetched again for every authentication (as aiokafka does).
        if token.lifetime_ms > 0:
            self._refresh_at = max(now, min(now + lifetime_s * REFRESH_WINDOW_FACTOR, now + lifetime_s - REFRESH_BUFFER_S))
        else:
            self._refresh_at = now
        self._token = token
        self._token_extensions = extensions


def _as_token(result: Any) -> oauthbearer.OAuthBearerToken:
    """A provider's answer as a token: an OAuthBearerToken, ``(token, expires_in_seconds)`` or a string."""
    if isinstance(result, oauthbearer.OAuthBearerToken):
        return result
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str):
        value, expires_in = result
        return oauthbearer.OAuthBearerToken(value=value, lifetime_ms=int((time.time() + float(expires_in)) * 1000))
    if isinstance(result, str) and result:
        return oauthbearer.OAuthBearerToken(value=result, lifetime_ms=_jwt_expiry_ms(result))
    raise KafkaConfigError(
        "sasl_oauth_token_provider",
        f"returned {type(result).__name__}; expected an OAuthBearerToken, (token, expires_in_seconds) or a token string",
    )


def _jwt_expiry_ms(token: str) -> int:
    """The ``exp`` claim of a JWT in ms, or 0 when the token is not a JWT with one."""
    parts = token.split(".")
    if len(parts) != 3:
        return 0
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        return int(float(claims["exp"]) * 1000)
    except (ValueError, KeyError, TypeError):
        return 0
