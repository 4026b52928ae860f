"""SASL OAUTHBEARER (RFC 7628) and the JWTs Kafka carries in it.

- The client initial response: ``n,,\\x01auth=Bearer <token>\\x01<key>=<value>\\x01...\\x01``,
  with SASL extensions (KIP-342) as extra key/value pairs.
- Kafka's default broker validation: unsecured JWS tokens (``alg: none``, KIP-255),
  and signed tokens checked against a JSON Web Key Set (KIP-768) with
  RS256/384/512 and ES256/384/512 through :mod:`cryptography`.

JWS verification is written over :mod:`cryptography` rather than a JWT library
to keep the dependency set to what TLS already needs; it supports only the
compact serialisation and the algorithms above, and refuses everything else.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JwkSet",
    "OAuthBearerToken",
    "ValidatedToken",
    "client_initial_response",
    "error_challenge",
    "parse_client_initial_response",
    "sign_token",
    "unsecured_token",
    "validate_signed",
    "validate_unsecured",
]

_SEPARATOR = "\x01"
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_RESERVED_KEY = "auth"


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    """A bearer token as a client presents it.

    ``lifetime_ms`` is when it expires, in ms since the epoch (0 = unknown), as in
    Java's ``OAuthBearerToken.lifetimeMs()``; ``extensions`` are sent with it.
    """

    value: str
    lifetime_ms: int = 0
    principal: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print the token itself
        return f"OAuthBearerToken(principal={self.principal!r}, lifetime_ms={self.lifetime_ms})"


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    """What the broker learned from a valid token."""

    principal: str
    lifetime_ms: int
    scope: tuple[str, ...]
    claims: Mapping[str, Any]


def client_initial_response(token: str, extensions: Mapping[str, str] | None = None) -> bytes:
    """The client's single OAUTHBEARER message; ValueError for an invalid extension."""
    if not token:
        raise ValueError("OAUTHBEARER needs a non-empty token")
    parts = [f"n,,{_SEPARATOR}auth=Bearer {token}{_SEPARATOR}"]
    for key, value in (extensions or {}).items():
        _check_extension(key, value)
        parts.append(f"{key}={value}{_SEPARATOR}")
    parts.append(_SEPARATOR)
    return "".join(parts).encode()


def _check_extension(key: str, value: str) -> None:
    if key == _RESERVED_KEY or not _EXTENSION_KEY.fullmatch(key):
        raise ValueError(f"invalid SASL extension name {key!r}: letters only, and not 'auth'")
    if not _EXTENSION_VALUE.fullmatch(value):
        raise ValueError(f"invalid value for SASL extension {key!r}")


def parse_client_initial_response(message: bytes) -> tuple[str, dict[str, str], str]:
    """``(token, extensions, authzid)`` from a client initial response; ValueError if malformed."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("OAUTHBEARER message is not UTF-8") from None
    header, sep, rest = text.partition(_SEPARATOR)
    if not sep or not header.startswith(("n,", "y,")) or not header.endswith(","):
        raise ValueError("invalid OAUTHBEARER GS2 header")
    authzid = header[2:-1].removeprefix("a=")
    if not rest.endswith(_SEPARATOR * 2):
        raise ValueError("OAUTHBEARER message must end with two separators")
    pairs: dict[str, str] = {}
    for item in rest[:-2].split(_SEPARATOR):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError("invalid OAUTHBEARER key/value pair")
        pairs[key] = value
    auth = pairs.pop(_RESERVED_KEY, "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ValueError("OAUTHBEARER message has no 'auth=Bearer <token>'")
    for key, value in pairs.items():
        _check_extension(key, value)
    return token.strip(), pairs, authzid


def error_challenge(status: str, scope: str | None = None) -> bytes:
    """The server's JSON error challenge (RFC 7628 3.2.2)."""
    body: dict[str, str] = {"status": status}
    if scope:
        body["scope"] = scope
    return json.dumps(body).encode()


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _split(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """Header, claims, signature and signing input of a compact JWS; ValueError when malformed."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("the token is not a compact JWS (three dot-separated parts)")
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
        signature = _b64url_decode(parts[2])
    except (ValueError, TypeError):
        raise ValueError("the token's header, claims or signature is not valid base64url JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("the token's header and claims must be JSON objects")
    return header, claims, signature, f"{parts[0]}.{parts[1]}".encode()


def unsecured_token(
    principal: str,
    lifetime_seconds: float = 3600,
    scope: Iterable[str] = (),
    principal_claim: str = "sub",
    **claims: Any,
) -> str:
    """An unsecured JWS (``alg: none``), what Kafka's default OAUTHBEARER setup accepts: for tests only."""
    now = time.time()
    body: dict[str, Any] = {principal_claim: principal, "iat": int(now), "exp": int(now + lifetime_seconds)}
    scopes = list(scope)
    if scopes:
        body["scope"] = " ".join(scopes)
    body.update(claims)
    header = _b64url_encode(json.dumps({"alg": "none"}).encode())
    return f"{header}.{_b64url_encode(json.dumps(body).encode())}."


def _checked(
    claims: Mapping[str, Any], principal_claim: str, scope_claim: str, allowable_clock_skew_ms: int
) -> ValidatedToken:
    now_ms = time.time() * 1000
    exp = _seconds(claims, "exp", required=True)
    assert exp is not None
    if exp * 1000 + allowable_clock_skew_ms <= now_ms:
        raise ValueError("the token has expired")
    nbf = _seconds(claims, "nbf")
    if nbf is not None and nbf * 1000 - allowable_clock_skew_ms > now_ms:
        raise ValueError("the token is not valid yet")
    _seconds(claims, "iat")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise ValueError(f"the token has no '{principal_claim}' claim naming the principal")
    raw_scope = claims.get(scope_claim, ())
    if isinstance(raw_scope, str):
        scope = tuple(raw_scope.split())
    elif isinstance(raw_scope, list | tuple) and all(isinstance(item, str) for item in raw_scope):
        scope = tuple(raw_scope)
    else:
        raise ValueError(f"the token's '{scope_claim}' claim is neither a string nor a list of strings")
    return ValidatedToken(principal.strip(), int(exp * 1000), scope, dict(claims))


def _seconds(claims: Mapping[str, Any], name: str, *, required: bool = False) -> float | None:
    """A NumericDate claim as a finite number (JSON also allows Infinity and NaN); ValueError if bad."""
    value = claims.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"the token's '{name}' claim is not a finite number")
    return float(value)


def validate_unsecured(
    token: str,
    required_scope: Iterable[str] = (),
    principal_claim: str = "sub",
    scope_claim: str = "scope",
    allowable_clock_skew_ms: int = 0,
) -> ValidatedToken:
    """Kafka's default validation (``OAuthBearerUnsecuredValidatorCallbackHandler``); ValueError if invalid."""
    header, claims, _signature, _ = _split(token)
    if header.get("alg") != "none":
        raise ValueError("an unsecured token must have alg 'none'")
    validated = _checked(claims, principal_claim, scope_claim, allowable_clock_skew_ms)
    missing = [s for s in required_scope if s not in validated.scope]
    if missing:
        raise ValueError(f"the token lacks the required scope {' '.join(missing)}")
    return validated


_HASHES = {"256": "SHA256", "384": "SHA384", "512": "SHA512"}


class JwkSet:
    """Public keys that may sign tokens, by key id (``kid``); a key without one matches any token."""

    def __init__(self, keys: Mapping[str | None, Any]) -> None:
        if not keys:
            raise ValueError("the key set holds no usable RSA or EC public key")
        self._keys = dict(keys)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> JwkSet:
        """A JWKS document (``{"keys": [...]}``) or a single JWK; keys of other types are skipped."""
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        entries = document.get("keys", [document])
        keys: dict[str | None, Any] = {}
        for jwk in entries:
            kty = jwk.get("kty")
            if kty == "RSA":
                numbers = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"]))
                keys[jwk.get("kid")] = numbers.public_key()
            elif kty == "EC":
                curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
                curve = curves.get(jwk.get("crv", ""))
                if curve is None:
                    continue
                keys[jwk.get("kid")] = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
        return cls(keys)

    @classmethod
    def from_file(cls, path: str) -> JwkSet:
        return cls.from_json(json.loads(Path(path).read_text()))

    @classmethod
    def from_pem_public_key(cls, pem: bytes, kid: str | None = None) -> JwkSet:
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        return cls({kid: load_pem_public_key(pem)})

    def key_for(self, kid: str | None) -> Any:
        if kid in self._keys:
            return self._keys[kid]
        if None in self._keys:
            return self._keys[None]
        raise ValueError(f"no key with kid {kid!r} in the key set")


def _int(value: str) -> int:
    return int.from_bytes(_b64url_decode(value), "big")


def _verify(key: Any, alg: str, signature: bytes, signing_input: bytes) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    family, bits = alg[:2], alg[2:]
    if bits not in _HASHES or family not in ("RS", "ES"):
        raise ValueError(f"unsupported token algorithm {alg!r}")
    digest = getattr(hashes, _HASHES[bits])()
    try:
        if family == "RS" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signing_input, padding.PKCS1v15(), digest)
        elif family == "ES" and isinstance(key, ec.EllipticCurvePublicKey):
            if len(signature) != 2 * ((key.curve.key_size + 7) // 8):  # RFC 7518 3.4: exactly r || s
                raise ValueError("the token's signature has the wrong length for its curve")
            half = len(signature) // 2
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big"))
            key.verify(der, signing_input, ec.ECDSA(digest))
        else:
            raise ValueError(f"the key for this token does not fit algorithm {alg}")
    except InvalidSignature:
        raise ValueError("the token's signature is invalid") from None


def validate_signed(
    token: str,
    keys: JwkSet,
    expected_audience: Iterable[str] = (),
    expected_issuer: str | None = None,
    principal_claim: str = "sub",
    scope_claim: str = "scope",
    allowable_clock_skew_ms: int = 30_000,
) -> ValidatedToken:
    """Kafka's JWKS validation (``OAuthBearerValidatorCallbackHandler``); ValueError if invalid."""
    header, claims, signature, signing_input = _split(token)
    alg = str(header.get("alg", ""))
    if alg == "none":
        raise ValueError("unsigned tokens are not accepted here")
    _verify(keys.key_for(header.get("kid")), alg, signature, signing_input)
    audience = list(expected_audience)
    if audience:
        aud = claims.get("aud")
        token_audience = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not set(audience) & set(token_audience):
            raise ValueError("the token's audience is not one this broker expects")
    if expected_issuer and claims.get("iss") != expected_issuer:
        raise ValueError("the token's issuer is not the one this broker expects")
    return _checked(claims, principal_claim, scope_claim, allowable_clock_skew_ms)


def sign_token(claims: Mapping[str, Any], private_key: Any, alg: str = "RS256", kid: str | None = None) -> str:
    """A compact JWS of ``claims`` signed with an RSA or EC private key (for tests and local providers)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    signing_input = f"{_b64url_encode(json.dumps(header).encode())}.{_b64url_encode(json.dumps(dict(claims)).encode())}"
    family, bits = alg[:2], alg[2:]
    if bits not in _HASHES:
        raise ValueError(f"unsupported algorithm {alg!r}")
    digest = getattr(hashes, _HASHES[bits])()
    if family == "RS" and isinstance(private_key, rsa.RSAPrivateKey):
        signature = private_key.sign(signing_input.encode(), padding.PKCS1v15(), digest)
    elif family == "ES" and isinstance(private_key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(private_key.sign(signing_input.encode(), ec.ECDSA(digest)))
        size = (private_key.curve.key_size + 7) // 8
        signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    else:
        raise ValueError(f"algorithm {alg} does not fit a {type(private_key).__name__}")
    return f"{signing_input}.{_b64url_encode(signature)}"
