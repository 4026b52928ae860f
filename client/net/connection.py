"""One asyncio connection to one broker: framing, pipelining, version negotiation.

Requests are pipelined: each gets a correlation id and a future; Kafka answers
in request order on a connection, so one reader task resolves them as frames
arrive.  A request timeout or any I/O error closes the connection and fails
every pending request, because after a lost frame the stream cannot be trusted.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from kafkakit import __version__
from kafkakit.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SslAuthenticationError,
    SSLVerificationError,
    UnsupportedVersionError,
)
from kafkakit.metrics import NetworkMetrics
from kafkakit.net.frames import FrameError, FrameProtocol
from kafkakit.net.sasl import SaslAuthenticator
from kafkakit.net.security import PLAINTEXT, SecurityConfig
from kafkakit.protocol.build import make_request
from kafkakit.protocol.framing import ApiKey, _reader, decode_response, encode_request_chunks
from kafkakit.protocol.versions import CLIENT_API_VERSIONS, pick_version
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

log = logging.getLogger(__name__)

#: TLS alerts by which a broker refuses the client's certificate (or its absence): not worth a retry.
_PEER_REFUSED_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)
_CORRELATION = struct.Struct(">i")
_UNSUPPORTED_VERSION = 35
# Re-authenticate at a random point in this share of the session lifetime, as the Java client
# does, so that a client's connections do not all re-authenticate at once.
_REAUTH_WINDOW = (0.85, 0.95)
#: Kafka refuses a re-authentication less than a second after the previous one began
#: (SocketServer's MIN_REAUTH_INTERVAL), answering ILLEGAL_SASL_STATE: never start sooner.
MIN_REAUTH_INTERVAL_S = 1.1
#: How long close() waits for unsent bytes (and a TLS close_notify) before it aborts the socket.
CLOSE_TIMEOUT_S = 5.0


class _Pending:
    __slots__ = ("api_key", "version", "future", "raw", "sent_at")

    def __init__(
        self, api_key: int, version: int, future: asyncio.Future[Any], raw: bool, sent_at: float
    ) -> None:
        self.api_key = api_key
        self.version = version
        self.future = future
        self.raw = raw
        self.sent_at = sent_at  # time.monotonic() when written (request-latency); 0.0 without metrics


class BrokerConnection:
    """A pipelined connection to one broker, negotiated with ApiVersions on connect."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = "kafkakit",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        on_close: Callable[[BrokerConnection], None] | None = None,
        security: SecurityConfig = PLAINTEXT,
        authenticator: SaslAuthenticator | None = None,
        metrics: NetworkMetrics | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.broker_api_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}
        self._on_close = on_close
        self._protocol: FrameProtocol | None = None
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 0
        self._closed = False
        self._close_reason: BaseException | None = None
        self.security = security
        if security.uses_sasl and authenticator is None:
            authenticator = SaslAuthenticator(security)
        self._authenticator = authenticator if security.uses_sasl else None
        #: Milliseconds the broker granted the current SASL session (KIP-368; 0 = unlimited).
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        # Frames written while re-authenticating wait here, in order (None: not re-authenticating).
        self._held: list[bytes] | None = None
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        #: The client's connection-layer sensors (None: metrics off); recorded per request/response.
        self.metrics = metrics
        self._counted = False  # counted in connection-count (so its close is counted once)

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._closed

    async def connect(self) -> None:
        """Open the socket (TLS when configured), negotiate API versions, then authenticate (SASL)."""
        await self._open_socket()
        try:
            await self._negotiate_versions()
            if self._authenticator is not None:
                self._session_started(await self._authenticator.authenticate(self))
        except BaseException as exc:
            # A broker that closes the socket during SASL has refused us; say which step.
            await self.close()
            if isinstance(exc, KafkaConnectionError) and not isinstance(exc, AuthenticationError):
                raise self._explain_early_close(exc) from exc
            raise

    async def _open_socket(self) -> None:
        tls = self.security.ssl_context if self.security.uses_ssl else None
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout(self.connect_timeout):
                transport, self._protocol = await asyncio.get_running_loop().create_connection(
                    lambda: FrameProtocol(self._dispatch, self._connection_lost),
                    self.host,
                    self.port,
                    ssl=tls,
                    server_hostname=self.host if tls is not None else None,
                    ssl_handshake_timeout=self.connect_timeout if tls is not None else None,
                )
                assert isinstance(transport, asyncio.Transport)
                self._transport = transport
                if self.metrics is not None:
                    self.metrics.connection_created()
                    self._counted = True
        except ssl.SSLCertVerificationError as exc:
            self._closed = True
            raise SSLVerificationError(
                f"TLS certificate verification of {where} failed: {exc.verify_message or exc.reason}"
            ) from exc
        except ssl.SSLError as exc:
            self._closed = True
            if exc.reason in _PEER_REFUSED_ALERTS:
                raise self._tls_refused(exc) from exc
            raise KafkaConnectionError(
                f"TLS handshake with {where} failed: {exc.reason or exc} (is {where} a TLS listener?)"
            ) from exc
        except (TimeoutError, OSError) as exc:
            self._closed = True
            raise KafkaConnectionError(f"cannot connect to {where}: {exc!r}") from exc

    def _tls_refused(self, exc: ssl.SSLError) -> SslAuthenticationError:
        return SslAuthenticationError(
            f"{self.host}:{self.port} refused this client's TLS certificate ({exc.reason}): the listener "
            "requires a client certificate it trusts (create_ssl_context(certfile=..., keyfile=...))"
        )

    def _explain_early_close(self, exc: KafkaConnectionError) -> KafkaConnectionError:
        """A connection lost before it was ready, with the likeliest reason in words."""
        where = f"{self.host}:{self.port}"
        if not self.broker_api_versions:
            hint = (
                "the TLS session ended (does the broker require a client certificate?)"
                if self.security.uses_ssl
                else "no ApiVersions answer (is it a TLS or SASL listener? check security_protocol)"
            )
        else:
            hint = "the broker closed the connection during SASL authentication"
        return KafkaConnectionError(f"connection to {where} lost before it was ready: {hint}: {exc}")

    async def _negotiate_versions(self) -> None:
        version = CLIENT_API_VERSIONS[ApiKey.API_VERSIONS][1]
        for _ in range(2):
            request = make_request(
                ApiKey.API_VERSIONS, version, client_software_name="kafkakit", client_software_version=__version__
            )
            try:
                response = await self.send(request)
            except _ApiVersionsFallback as fallback:
                response = fallback.response
            if response.error_code == _UNSUPPORTED_VERSION:
                ours = {k.api_key: k.max_version for k in response.api_keys}.get(ApiKey.API_VERSIONS, 0)
                version = min(ours, CLIENT_API_VERSIONS[ApiKey.API_VERSIONS][1])
                continue
            if response.error_code:
                raise KafkaConnectionError(f"ApiVersions failed with error {int(response.error_code)}")
            self.broker_api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
            for feature in getattr(response, "finalized_features", ()):
                self.finalized_features[feature.name] = int(feature.max_version_level)
            return
        raise UnsupportedVersionError("broker rejected every ApiVersions version")

    async def sasl_call(self, api_key: int, **fields: Any) -> Any:
        """One SASL request/response, sent ahead of any frames held back by a re-authentication."""
        future = self.send_frame(self.request(api_key, **fields), bypass_hold=True)
        assert future is not None
        async with asyncio.timeout(self.request_timeout):
            return await asyncio.shield(future)

    # -- KIP-368 re-authentication ------------------------------------------

    def _session_started(self, lifetime_ms: int) -> None:
        self.session_lifetime_ms = lifetime_ms
        if lifetime_ms <= 0 or self._closed:
            return
        delay = max(lifetime_ms / 1000 * random.uniform(*_REAUTH_WINDOW), MIN_REAUTH_INTERVAL_S)
        self._reauth_timer = asyncio.get_running_loop().call_later(delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._closed or self._authenticator is None:
            return
        self._reauth_task = asyncio.create_task(self._reauthenticate(), name=f"kafkakit-reauth-{self.host}:{self.port}")

    async def _reauthenticate(self) -> None:
        """Authenticate again on this connection while other requests wait, so none fails.

        Requests already in flight complete normally (the broker answers them first);
        requests made meanwhile are queued and written once the new session is up.
        """
        assert self._authenticator is not None
        self._held = []
        try:
            lifetime_ms = await self._authenticator.authenticate(self)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            log.warning("re-authentication to %s:%s failed: %s", self.host, self.port, exc)
            self._fail(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a mechanism bug must close, not strand requests
            self._fail(KafkaConnectionError(f"re-authentication to {self.host}:{self.port} failed: {exc!r}"))
            return
        finally:
            held, self._held = self._held, None
            if held and not self._closed and self._transport is not None:
                self._transport.write(b"".join(held))
        self.reauthentications += 1
        self._session_started(lifetime_ms)

    def version(self, api_key: int) -> int:
        """The version to use for ``api_key`` on this connection."""
        chosen = pick_version(api_key, self.broker_api_versions.get(api_key))
        if chosen is None:
            raise UnsupportedVersionError(
                f"no common version for API {api_key}: broker {self.broker_api_versions.get(api_key)}, "
                f"client {CLIENT_API_VERSIONS.get(api_key)}"
            )
        return chosen

    def supports(self, api_key: int) -> bool:
        return pick_version(api_key, self.broker_api_versions.get(api_key)) is not None

    def request(self, api_key: int, **fields: Any) -> Any:
        """Build the request object for ``api_key`` at the negotiated version."""
        return make_request(api_key, self.version(api_key), **fields)

    async def call(self, api_key: int, **fields: Any) -> Any:
        """Build, send and await one request at the negotiated version."""
        return await self.send(self.request(api_key, **fields))

    def send_frame(
        self, request: Any, *, expect_response: bool = True, raw: bool = False, bypass_hold: bool = False
    ) -> asyncio.Future[Any] | None:
        """Queue ``request`` for writing and return the future of its response.

        Synchronous so a caller can pipeline several requests without awaiting
        each; with ``expect_response=False`` (acks=0 produce) returns None.
        ``raw=True`` resolves the future with the undecoded response frame body.
        """
        if self._closed or self._transport is None:
            raise KafkaConnectionError(f"connection to {self.host}:{self.port} is closed") from self._close_reason
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        chunks = encode_request_chunks(correlation_id, self.client_id, request)
        future: asyncio.Future[Any] | None = None
        metrics = self.metrics
        now = 0.0
        if metrics is not None:
            now = time.monotonic()
            metrics.request_sent(sum(map(len, chunks)), now)
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = _Pending(
                type(request).__api_key__, type(request).__version__, future, raw, now
            )
        if self._held is not None and not bypass_hold:
            self._held.extend(chunks)
        else:
            write = self._transport.write
            for chunk in chunks:  # a record batch goes out as its own chunk: no copy into a frame buffer
                write(chunk)
        return future

    async def send(self, request: Any, *, expect_response: bool = True, raw: bool = False, timeout: float | None = None) -> Any:
        """Send ``request`` and wait for its response (None when no response is expected)."""
        future = self.send_frame(request, expect_response=expect_response, raw=raw)
        assert self._transport is not None and self._protocol is not None
        if self._transport.get_write_buffer_size() > 1 << 20:
            await self._protocol.drain()
        if future is None:
            return None
        wait = self.request_timeout if timeout is None else timeout
        try:
            # Not wait_for: on Python 3.11 it returns the response and drops a cancellation that
            # lands in the step the response arrives, and the cancelled caller carries on.
            async with asyncio.timeout(wait):
                return await asyncio.shield(future)
        except TimeoutError:
            error = KafkaTimeoutError(f"request {type(request).__name__} to {self.host}:{self.port} timed out after {wait:.1f}s")
            self._fail(error)
            raise error from None

    def _connection_lost(self, exc: BaseException | None) -> None:
        """The socket closed, failed, or sent something that is not a frame: fail what waits on it."""
        if isinstance(exc, ssl.SSLError):
            # TLS 1.3 sends the server's verdict on our certificate after the handshake.
            refused = exc.reason in _PEER_REFUSED_ALERTS
            self._fail(self._tls_refused(exc) if refused else KafkaConnectionError(f"TLS error from {self.host}:{self.port}: {exc!r}"))
        elif isinstance(exc, KafkaConnectionError):
            self._fail(exc)
        elif exc is None or isinstance(exc, ConnectionError | OSError):
            self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
        else:  # an invalid frame, or a decoding bug: callers must not hang
            if not isinstance(exc, FrameError):
                log.error("error reading from %s:%s", self.host, self.port, exc_info=exc)
            self._fail(KafkaConnectionError(f"error reading from {self.host}:{self.port}: {exc!r}"))

    def _dispatch(self, body: memoryview) -> None:
        """One response frame (a view of the receive buffer, valid during this call only)."""
        (correlation_id,) = _CORRELATION.unpack_from(body, 0)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            raise KafkaConnectionError(f"response with unknown correlation id {correlation_id}")
        metrics = self.metrics
        if metrics is not None:
            metrics.response_received(len(body) + 4, pending.api_key, pending.sent_at, time.monotonic())
        if pending.future.done():
            return
        if pending.raw:
            pending.future.set_result(bytes(body))
            return
        try:
            _, response = decode_response(pending.api_key, pending.version, body)
        except Exception as exc:
            if pending.api_key == ApiKey.API_VERSIONS:
                # A broker that does not know our ApiVersions version answers in the
                # v0 layout (header v0) with UNSUPPORTED_VERSION and its own range.
                response, _ = _reader(ApiVersionsResponseV0)(body, 4)
                pending.future.set_exception(_ApiVersionsFallback(response))
                return
            pending.future.set_exception(KafkaConnectionError(f"cannot decode response to API {pending.api_key} v{pending.version}: {exc!r}"))
            return
        pending.future.set_result(response)

    def _fail(self, error: BaseException, *, graceful: bool = False) -> None:
        """Fail every pending request with ``error`` and close the socket.

        After a failure the socket is aborted (unsent bytes are worthless, and a
        peer that stopped reading would hold a graceful close forever); close()
        closes gracefully, so that what was written (acks=0 records) still goes out.
        """
        if self._closed:
            return
        self._closed = True
        self._close_reason = error
        if self._counted:
            self._counted = False
            assert self.metrics is not None
            self.metrics.connection_closed()
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if not item.future.done():
                item.future.set_exception(error)
                item.future.exception()  # mark retrieved: callers may have given up waiting
        if self._transport is not None:
            if graceful:
                self._transport.close()
            else:
                self._transport.abort()
        if self._on_close is not None:
            self._on_close(self)

    async def close(self) -> None:
        """Close the socket and fail pending requests (within CLOSE_TIMEOUT_S, even if the peer hangs)."""
        self._fail(KafkaConnectionError("connection closed"), graceful=True)
        task = self._reauth_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self._protocol is not None and self._transport is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.shield(self._protocol.closed)
            except TimeoutError:  # the peer does not read (a paused broker): give up on the rest
                self._transport.abort()


class _ApiVersionsFallback(Exception):
    def __init__(self, response: Any) -> None:
        super().__init__("ApiVersions fallback")
        self.response = response
