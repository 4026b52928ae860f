"""The SASL and TLS codecs of kafkakit.security, against published vectors and each other."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from kafkakit.security import jaas, oauthbearer, plain, scram, tls

# RFC 7677 section 3: SCRAM-SHA-256 with user "user", password "pencil".
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_scram_sha_256_matches_rfc_7677() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final_message(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify_server_final(RFC7677_SERVER_FINAL)
    tampered = RFC7677_SERVER_FINAL.replace(b"v=6", b"v=7")
    for bad in (tampered, b"v=" + base64.b64encode(b"x" * 32), b"e=other-error"):
        with pytest.raises(ValueError):
            client.verify_server_final(bad)


def test_scram_rfc_7677_stored_credential_matches_a_hand_computation() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism: str) -> None:
    stored = {"al,i=ce": scram.make_credential(mechanism, "secret", iterations=4096)}
    server = scram.ScramServer(mechanism, stored.get)
    client = scram.ScramClient(mechanism, "al,i=ce", "secret")
    first = client.first_message()
    assert first.startswith(b"n,,n=al=2Ci=3Dce,r=")  # RFC 5802 escaping
    server_first = server.handle_client_first(first)
    client_nonce = first.split(b",r=")[1]
    assert server_first.startswith(b"r=" + client_nonce) and server_first.endswith(b",i=4096")
    final = server.handle_client_final(client.final_message(server_first))
    client.verify_server_final(final)
    assert server.username == "al,i=ce"
    digest_size = hashlib.new(mechanism.replace("SCRAM-", "").replace("-", "").lower()).digest_size
    assert len(base64.b64decode(final[2:])) == digest_size


def test_scram_wrong_password_and_unknown_user_fail_alike() -> None:
    stored = {"alice": scram.make_credential("SCRAM-SHA-512", "secret")}
    for user, password in (("alice", "wrong"), ("mallory", "secret")):
        server = scram.ScramServer("SCRAM-SHA-512", stored.get)
        client = scram.ScramClient("SCRAM-SHA-512", user, password)
        server_first = server.handle_client_first(client.first_message())
        assert b",s=" in server_first and b",i=4096" in server_first  # an unknown user still gets a salt
        with pytest.raises(ValueError, match="invalid"):
            server.handle_client_final(client.final_message(server_first))
    # the fake salt is stable per name, so probing twice does not reveal that the user is unknown
    probe = [
        scram.ScramServer("SCRAM-SHA-512", stored.get).handle_client_first(b"n,,n=eve,r=a") for _ in "ab"
    ]
    assert probe[0].split(b",")[1] == probe[1].split(b",")[1]


def test_scram_server_rejects_bad_client_messages() -> None:
    stored = {"alice": scram.make_credential("SCRAM-SHA-256", "secret")}
    # channel binding, an authzid that is not the user, a bad escape, a bad GS2 flag, no nonce
    for first in (b"p=tls-unique,,n=a,r=b", b"n,a=bob,n=a,r=b", b"n,,n=a=2Xb,r=b", b"x,,n=a,r=b", b"n,,n=a"):
        with pytest.raises(ValueError):
            scram.ScramServer("SCRAM-SHA-256", stored.get).handle_client_first(first)
    server = scram.ScramServer("SCRAM-SHA-256", stored.get)
    client = scram.ScramClient("SCRAM-SHA-256", "alice", "secret")
    final = client.final_message(server.handle_client_first(client.first_message()))
    with pytest.raises(ValueError, match="nonce"):
        server.handle_client_final(final.replace(b",r=", b",r=X", 1))
    with pytest.raises(ValueError, match="channel binding"):
        server.handle_client_final(final.replace(b"c=biws", b"c=eSws"))
    assert server.handle_client_final(final).startswith(b"v=")  # the untouched message still works


def test_scram_client_checks_the_server() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(ValueError, match="nonce"):
        client.final_message(b"r=xyz123,s=c2FsdA==,i=4096")
    with pytest.raises(ValueError, match="nonce"):
        client.final_message(b"r=abc,s=c2FsdA==,i=4096")  # not extended at all
    with pytest.raises(ValueError, match="iterations"):
        client.final_message(b"r=abcdef,s=c2FsdA==,i=4095")
    with pytest.raises(ValueError, match="refused"):
        client.final_message(b"e=invalid-proof")
    with pytest.raises(ValueError, match="lacks"):
        client.final_message(b"r=abcdef,i=4096")
    with pytest.raises(ValueError, match="before"):
        client.verify_server_final(RFC7677_SERVER_FINAL)


def test_scram_credential_string_round_trip() -> None:
    credential = scram.make_credential("SCRAM-SHA-256", "pw", iterations=8192, salt=b"salty")
    text = credential.to_kafka_string()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_kafka_string(text) == credential
    for bad in ("salt=abc", text.replace("=8192", "=many"), "salt=!!,stored_key=,server_key=,iterations=1"):
        with pytest.raises(ValueError):
            scram.ScramCredential.from_kafka_string(bad)
    assert scram.mechanism_by_type(2).name == "SCRAM-SHA-512"
    salted = scram.salted_password("SCRAM-SHA-256", "pw", b"salty", 8192)
    assert scram.credential_from_salted_password("SCRAM-SHA-256", salted, b"salty", 8192) == credential
    for iterations in (4095, 16385):
        with pytest.raises(ValueError, match="iterations"):
            scram.make_credential("SCRAM-SHA-256", "pw", iterations=iterations)
    with pytest.raises(ValueError):
        scram.make_credential("SCRAM-SHA-1", "pw")


def test_plain_messages() -> None:
    message = plain.client_message("alice", "pa ss")
    assert message == b"\0alice\0pa ss"
    assert plain.parse_client_message(message) == ("", "alice", "pa ss")
    assert plain.client_message("bob", "pw", authzid="admin") == b"admin\0bob\0pw"
    assert plain.parse_client_message(b"admin\0bob\0pw") == ("admin", "bob", "pw")
    for bad in (b"alice\0secret", b"\0alice\0", b"\0\0secret", b"\xff\0a\0b", b"a\0b\0c\0d"):
        with pytest.raises(ValueError):
            plain.parse_client_message(bad)
    for args in (("al\0ice", "x"), ("alice", "x\0y"), ("alice", "")):
        with pytest.raises(ValueError):
            plain.client_message(*args)
    with pytest.raises(ValueError):
        plain.client_message("alice", "x", authzid="a\0")


def test_jaas_config_lines() -> None:
    entry = jaas.parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="a\\"b" user_admin="admin-secret" user_bob=bob-secret;'
    )
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options == {
        "username": "admin",
        "password": 'a"b',
        "user_admin": "admin-secret",
        "user_bob": "bob-secret",
    }
    assert jaas.parse_jaas_config('M Optional k="x\\\\y;z";').options == {"k": "x\\y;z"}
    assert jaas.parse_jaas_config("M sufficient;").options == {}
    for bad in ('X required a="b"', 'X mandatory a="b";', "X required a=;", "X", 'X required a "b";'):
        with pytest.raises(ValueError):
            jaas.parse_jaas_config(bad)


def test_oauthbearer_messages_and_unsecured_tokens() -> None:
    token = oauthbearer.unsecured_token("alice", scope=["read", "write"])
    extensions = {"traceId": "t-1", "logicalCluster": "lkc 1"}
    message = oauthbearer.client_initial_response(token, extensions)
    assert message == f"n,,\x01auth=Bearer {token}\x01traceId=t-1\x01logicalCluster=lkc 1\x01\x01".encode()
    assert oauthbearer.parse_client_initial_response(message) == (token, extensions, "")
    with_authzid = b"n,a=alice,\x01auth=Bearer tok\x01\x01"
    assert oauthbearer.parse_client_initial_response(with_authzid) == ("tok", {}, "alice")
    for name in ("auth", "a1", "", "a-b"):
        with pytest.raises(ValueError):
            oauthbearer.client_initial_response(token, {name: "x"})
    for bad in (
        b"n,,\x01auth=Bearer t\x01",
        b"n,,\x01auth=Basic t\x01\x01",
        b"n,,\x01a1=x\x01auth=Bearer t\x01\x01",
    ):
        with pytest.raises(ValueError):
            oauthbearer.parse_client_initial_response(bad)
    validated = oauthbearer.validate_unsecured(token, required_scope=["read"])
    assert validated.principal == "alice" and validated.scope == ("read", "write")
    assert validated.lifetime_ms == validated.claims["exp"] * 1000
    with pytest.raises(ValueError, match="scope"):
        oauthbearer.validate_unsecured(token, required_scope=["admin"])
    with pytest.raises(ValueError, match="expired"):
        oauthbearer.validate_unsecured(oauthbearer.unsecured_token("alice", lifetime_seconds=-5))
    custom = oauthbearer.unsecured_token("carol", principal_claim="upn")
    assert oauthbearer.validate_unsecured(custom, principal_claim="upn").principal == "carol"
    with pytest.raises(ValueError, match="principal"):
        oauthbearer.validate_unsecured(custom)
    header = _b64url(json.dumps({"alg": "HS256"}).encode())
    with pytest.raises(ValueError, match="none"):
        oauthbearer.validate_unsecured(header + token[token.index(".") :])
    assert json.loads(oauthbearer.error_challenge("invalid_token")) == {"status": "invalid_token"}


@pytest.mark.parametrize(
    "claims",
    ['{"sub":"a","exp":%d,"scope":5}', '{"sub":"a","exp":Infinity}', '{"sub":"a","exp":"%d"}', "[1]"],
    ids=["numeric-scope", "infinite-exp", "string-exp", "not-an-object"],
)
def test_unsecured_tokens_with_odd_claims_raise_value_error(claims: str) -> None:
    # The broker (broker_min/security/authenticator.py) catches only ValueError from validation,
    # and unsecured tokens come straight from unauthenticated clients.
    body = claims.replace("%d", str(int(time.time()) + 60)) if "%d" in claims else claims
    header = _b64url(json.dumps({"alg": "none"}).encode())
    token = f"{header}.{_b64url(body.encode())}."
    with pytest.raises(ValueError):
        oauthbearer.validate_unsecured(token)


def test_signed_tokens_rs256_and_es256() -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    keys = oauthbearer.JwkSet.from_pem_public_key(
        rsa_key.public_key().public_bytes(serialization.Encoding.PEM, spki)
    )
    claims = {"sub": "svc", "aud": ["kafka"], "iss": "idp", "exp": time.time() + 60, "scope": "a b"}
    token = oauthbearer.sign_token(claims, rsa_key)
    validated = oauthbearer.validate_signed(token, keys, expected_audience=["kafka"], expected_issuer="idp")
    assert validated.principal == "svc" and validated.scope == ("a", "b")
    with pytest.raises(ValueError, match="audience"):
        oauthbearer.validate_signed(token, keys, expected_audience=["other"])
    with pytest.raises(ValueError, match="issuer"):
        oauthbearer.validate_signed(token, keys, expected_issuer="evil")
    head, body, signature = token.split(".")
    other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = oauthbearer.sign_token(claims, other_rsa)
    raw = bytearray(base64.urlsafe_b64decode(signature + "=="))
    raw[-1] ^= 1
    richer = _b64url(json.dumps({**claims, "sub": "admin"}).encode())
    # another key's signature, a flipped bit, claims changed under the original signature
    for bad in (
        f"{head}.{body}.{forged.split('.')[2]}",
        f"{head}.{body}.{_b64url(raw)}",
        f"{head}.{richer}.{signature}",
    ):
        with pytest.raises(ValueError, match="signature"):
            oauthbearer.validate_signed(bad, keys)
    with pytest.raises(ValueError, match="signature"):  # the right token, the wrong key
        oauthbearer.validate_signed(forged, keys)
    expired = oauthbearer.sign_token({**claims, "exp": time.time() - 120}, rsa_key)
    with pytest.raises(ValueError, match="expired"):
        oauthbearer.validate_signed(expired, keys)

    ec_key = ec.generate_private_key(ec.SECP256R1())
    numbers = ec_key.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "kid": "k1", "x": _b64url(numbers.x.to_bytes(32, "big"))}
    jwks = oauthbearer.JwkSet.from_json({"keys": [{**jwk, "y": _b64url(numbers.y.to_bytes(32, "big"))}]})
    ec_claims = {"sub": "ec", "exp": time.time() + 60}
    es_token = oauthbearer.sign_token(ec_claims, ec_key, alg="ES256", kid="k1")
    assert len(base64.urlsafe_b64decode(es_token.split(".")[2] + "==")) == 64  # JWS r||s, not DER
    assert oauthbearer.validate_signed(es_token, jwks).principal == "ec"
    other_ec = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(ValueError, match="signature"):  # the wrong EC key
        oauthbearer.validate_signed(oauthbearer.sign_token(ec_claims, other_ec, alg="ES256", kid="k1"), jwks)
    with pytest.raises(ValueError, match="kid"):
        oauthbearer.validate_signed(oauthbearer.sign_token(ec_claims, ec_key, alg="ES256", kid="k2"), jwks)
    with pytest.raises(ValueError, match="fit"):  # an RS256 token against an EC key
        oauthbearer.validate_signed(oauthbearer.sign_token(ec_claims, rsa_key, kid="k1"), jwks)
    with pytest.raises(ValueError, match="unsigned"):
        oauthbearer.validate_signed(oauthbearer.unsecured_token("x"), jwks)
    with pytest.raises(ValueError):
        oauthbearer.sign_token(ec_claims, ec_key, alg="RS256")


def _self_signed() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.datetime.now(datetime.UTC)
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    builder = builder.serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
    return key, builder.sign(key, hashes.SHA256())


def test_tls_contexts_and_pkcs12_stores(tmp_path: Path) -> None:
    context = tls.create_ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    relaxed = tls.create_ssl_context(check_hostname=False)
    assert not relaxed.check_hostname and relaxed.verify_mode == ssl.CERT_REQUIRED

    key, cert = _self_signed()
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    store = tmp_path / "client.p12"
    encryption = serialization.BestAvailableEncryption(b"pw")
    store.write_bytes(pkcs12.serialize_key_and_certificates(b"c", key, cert, None, encryption))
    out = tmp_path / "out"
    out.mkdir()
    cert_path, key_path = tls.pkcs12_to_pem_files(str(store), "pw", str(out))
    assert Path(cert_path).read_bytes() == cert_pem
    loaded = serialization.load_pem_private_key(Path(key_path).read_bytes(), None)
    assert loaded.public_key().public_numbers() == key.public_key().public_numbers()
    assert Path(key_path).stat().st_mode & 0o077 == 0  # the key file is private
    assert tls.load_pkcs12_truststore_pem(str(store), "pw") == cert_pem.decode()
    tls.create_ssl_context(certfile=str(store), password="pw")  # a PKCS12 client certificate loads
    with pytest.raises(ValueError):
        tls.load_pkcs12(str(store), "wrong")
    with pytest.raises(ValueError):
        tls.create_ssl_context(certfile=str(store), password="wrong")

    truststore = tmp_path / "trust.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [cert], encryption))
    ca_pem = tls.load_pkcs12_truststore_pem(str(truststore), "pw")
    assert ca_pem == cert_pem.decode()
    context = tls.create_ssl_context(cadata=ca_pem)
    assert context.cert_store_stats()["x509"] == 1  # exactly the truststore's certificate is trusted
    with pytest.raises(ValueError, match="no private key"):
        tls.pkcs12_to_pem_files(str(truststore), "pw", str(tmp_path))
