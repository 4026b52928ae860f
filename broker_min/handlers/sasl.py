"""SaslHandshake (key 17, v1) and SaslAuthenticate (key 36, v0-2) outside an authentication.

On a SASL listener the server hands these to the connection's authenticator
(broker_min/security/authenticator.py) before any handler runs.  A request that
reaches this module came in on a listener without SASL, or out of order on an
authenticated connection: Kafka answers both with ILLEGAL_SASL_STATE.  After a v0
handshake the client sends bare SASL tokens (before KIP-152): the server reads those itself.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kafkakit.broker.handlers.base import ApiHandler, make
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


async def handle_sasl_handshake(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """No SASL on this listener (or already authenticated): ILLEGAL_SASL_STATE, no mechanisms."""
    return make(response_class(SASL_HANDSHAKE, header.api_version), error_code=ErrorCode.illegal_sasl_state, mechanisms=())


async def handle_sasl_authenticate(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """ILLEGAL_SASL_STATE, with Kafka's message."""
    return make(
        response_class(SASL_AUTHENTICATE, header.api_version),
        error_code=ErrorCode.illegal_sasl_state,
        error_message="Unexpected SaslAuthenticate request: no SASL exchange is in progress",
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )


HANDLERS = (
    ApiHandler(SASL_HANDSHAKE, 0, 1, handle_sasl_handshake),
    ApiHandler(SASL_AUTHENTICATE, 0, 2, handle_sasl_authenticate),
)
