"""The SASL and TLS codecs of kafkakit.security, against published vectors and each other."""

from __future__ import annotations

import base64
import json
import ssl
import time
from pathlib import Path

import pytest
from kafkakit.security import jaas, oauthbearer, plain, scram, tls

# RFC 7677 section 3: SCRAM-SHA-256 with user "user", password "pencil".
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_matches_rfc_7677() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final_message(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify_server_final(RFC7677_SERVER_FINAL)
    with pytest.raises(ValueError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism: str) -> None:
    stored = {"al,i=ce": scram.make_credential(mechanism, "secret", iterations=4096)}
    server = scram.ScramServer(mechanism, stored.get)
    client = scram.ScramClient(mechanism, "al,i=ce", "secret")
    assert b"n=al=2Ci=3Dce," in client.first_message()  # RFC 5802 escaping
    final = server.handle_client_final(client.final_message(server.handle_client_first(client.first_message())))
    client.verify_server_final(final)
    assert server.username == "al,i=ce"


def test_scram_wrong_password_and_unknown_user_fail_alike() -> None:
    stored = {"alice": scram.make_credential("SCRAM-SHA-512", "secret")}
    for user, password in (("alice", "wrong"), ("mallory", "secret")):
        server = scram.ScramServer("SCRAM-SHA-512", stored.get)
        client = scram.ScramClient("SCRAM-SHA-512", user, password)
        server_first = server.handle_client_first(client.first_message())
        assert b",s=" in server_first and b",i=4096" in server_first  # an unknown user still gets a salt
        with pytest.raises(ValueError):
            server.handle_client_final(client.final_message(server_first))


def test_scram_client_checks_the_server() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(ValueError, match="nonce"):
        client.final_message(b"r=xyz123,s=c2FsdA==,i=4096")
    with pytest.raises(ValueError, match="iterations"):
        scram.ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc").final_message(b"r=abcdef,s=c2FsdA==,i=1024")
    with pytest.raises(ValueError, match="refused"):
        client.final_message(b"e=invalid-proof")


def test_scram_credential_string_round_trip() -> None:
    credential = scram.make_credential("SCRAM-SHA-256", "pw", iterations=8192, salt=b"salty")
    text = credential.to_kafka_string()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_kafka_string(text) == credential
    with pytest.raises(ValueError):
        scram.ScramCredential.from_kafka_string("salt=abc")
    assert scram.mechanism_by_type(2).name == "SCRAM-SHA-512"
    salted = scram.salted_password("SCRAM-SHA-256", "pw", b"salty", 8192)
    assert scram.credential_from_salted_password("SCRAM-SHA-256", salted, b"salty", 8192) == credential


def test_plain_messages() -> None:
    message = plain.client_message("alice", "pa ss")
    assert message == b"\0alice\0pa ss"
    assert plain.parse_client_message(message) == ("", "alice", "pa ss")
    for bad in (b"alice\0secret", b"\0alice\0", b"\0\0secret", b"\xff\0a\0b"):
        with pytest.raises(ValueError):
            plain.parse_client_message(bad)
    with pytest.raises(ValueError):
        plain.client_message("al\0ice", "x")


def test_jaas_config_lines() -> None:
    entry = jaas.parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a\\"b" user_admin="admin-secret" user_bob=bob-secret;'
    )
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options == {"username": "admin", "password": 'a"b', "user_admin": "admin-secret", "user_bob": "bob-secret"}
    for bad in ('X required a="b"', 'X mandatory a="b";', 'X required a=;', "X"):
        with pytest.raises(ValueError):
            jaas.parse_jaas_config(bad)


def test_oauthbearer_messages_and_unsecured_tokens() -> None:
    token = oauthbearer.unsecured_token("alice", scope=["read", "write"])
    message = oauthbearer.client_initial_response(token, {"traceId": "t-1"})
    assert message.startswith(b"n,,\x01auth=Bearer ") and message.endswith(b"\x01\x01")
    assert oauthbearer.parse_client_initial_response(message) == (token, {"traceId": "t-1"}, "")
    for name in ("auth", "a1", ""):
        with pytest.raises(ValueError):
            oauthbearer.client_initial_response(token, {name: "x"})
    validated = oauthbearer.validate_unsecured(token, required_scope=["read"])
    assert validated.principal == "alice" and validated.scope == ("read", "write")
    with pytest.raises(ValueError, match="scope"):
        oauthbearer.validate_unsecured(token, required_scope=["admin"])
    with pytest.raises(ValueError, match="expired"):
        oauthbearer.validate_unsecured(oauthbearer.unsecured_token("alice", lifetime_seconds=-5))
    header = base64.urlsafe_b64encode(json.dumps({"alg": "HS256"}).encode()).rstrip(b"=").decode()
    with pytest.raises(ValueError, match="none"):
        oauthbearer.validate_unsecured(header + token[token.index(".") :])
    assert json.loads(oauthbearer.error_challenge("invalid_token")) == {"status": "invalid_token"}


def test_signed_tokens_rs256_and_es256() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    keys = oauthbearer.JwkSet.from_pem_public_key(pem)
    claims = {"sub": "svc", "aud": ["kafka"], "iss": "https://idp", "exp": time.time() + 60}
    token = oauthbearer.sign_token(claims, rsa_key)
    validated = oauthbearer.validate_signed(token, keys, expected_audience=["kafka"], expected_issuer="https://idp")
    assert validated.principal == "svc"
    with pytest.raises(ValueError, match="audience"):
        oauthbearer.validate_signed(token, keys, expected_audience=["other"])
    with pytest.raises(ValueError, match="issuer"):
        oauthbearer.validate_signed(token, keys, expected_issuer="https://evil")
    head, body, _signature = token.split(".")
    forged = oauthbearer.sign_token(claims, rsa.generate_private_key(public_exponent=65537, key_size=2048))
    with pytest.raises(ValueError, match="signature"):
        oauthbearer.validate_signed(f"{head}.{body}.{forged.split('.')[2]}", keys)

    ec_key = ec.generate_private_key(ec.SECP256R1())
    numbers = ec_key.public_key().public_numbers()

    def b64(value: int) -> str:
        return base64.urlsafe_b64encode(value.to_bytes(32, "big")).rstrip(b"=").decode()

    jwks = oauthbearer.JwkSet.from_json({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "x": b64(numbers.x), "y": b64(numbers.y)}]})
    es_token = oauthbearer.sign_token({"sub": "ec", "exp": time.time() + 60}, ec_key, alg="ES256", kid="k1")
    assert oauthbearer.validate_signed(es_token, jwks).principal == "ec"
    with pytest.raises(ValueError, match="kid"):
        oauthbearer.validate_signed(oauthbearer.sign_token({"sub": "ec", "exp": time.time() + 60}, ec_key, alg="ES256", kid="k2"), jwks)
    with pytest.raises(ValueError, match="unsigned"):
        oauthbearer.validate_signed(oauthbearer.unsecured_token("x"), jwks)


def test_tls_contexts_and_pkcs12(tmp_path: Path) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    context = tls.create_ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not tls.create_ssl_context(check_hostname=False).check_hostname

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    store = tmp_path / "client.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(b"c", key, cert, None, serialization.BestAvailableEncryption(b"pw")))
    cert_path, key_path = tls.pkcs12_to_pem_files(str(store), "pw", str(tmp_path))
    assert Path(cert_path).read_bytes().startswith(b"-----BEGIN CERTIFICATE")
    assert Path(key_path).stat().st_mode & 0o077 == 0  # the key file is private
    assert "BEGIN CERTIFICATE" in tls.load_pkcs12_truststore_pem(str(store), "pw")
    tls.create_ssl_context(certfile=str(store), password="pw")  # a PKCS12 client certificate loads
    with pytest.raises(ValueError):
        tls.load_pkcs12(str(store), "wrong")
