"""TLS contexts for Kafka clients, and PKCS12 stores read through :mod:`cryptography`.

:func:`create_ssl_context` mirrors aiokafka's helper and adds ``check_hostname``.
Python's :mod:`ssl` loads keys and certificates only from PEM files, so PKCS12
stores (what Kafka's ``ssl.keystore.type=PKCS12`` names) are converted to PEM
in a private temporary directory that is removed once loaded.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["create_ssl_context", "load_pkcs12", "load_pkcs12_truststore_pem", "pkcs12_to_pem_files"]


def create_ssl_context(
    *,
    cafile: str | None = None,
    capath: str | None = None,
    cadata: str | bytes | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | None = None,
    check_hostname: bool = True,
    crlfile: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: TLS 1.2+, the server's certificate verified, its hostname checked.

    - ``cafile``/``capath``/``cadata``: the CAs to trust; without any, the system's.
    - ``certfile``/``keyfile``/``password``: the client certificate for mutual TLS.
      ``certfile`` may be a PKCS12 store (``.p12``/``.pfx``), opened with ``password``.
    - ``check_hostname=False`` accepts any name on a trusted certificate (like
      ``ssl.endpoint.identification.algorithm=`` in Java); the chain is still verified.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath, cadata=cadata)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    if crlfile is not None:
        context.load_verify_locations(cafile=crlfile)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if certfile is not None:
        if certfile.lower().endswith((".p12", ".pfx")):
            _load_pkcs12_chain(context, certfile, password)
        else:
            context.load_cert_chain(certfile, keyfile, password)
    return context


def _load_pkcs12_chain(context: ssl.SSLContext, location: str, password: str | None) -> None:
    directory = tempfile.mkdtemp(prefix="kafkakit-tls-")
    try:
        cert, key = pkcs12_to_pem_files(location, password, directory)
        context.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def load_pkcs12(location: str, password: str | None) -> tuple[Any, Any, list[Any]]:
    """``(private_key, certificate, additional_certificates)`` of a PKCS12 file; ValueError if unreadable."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = Path(location).read_bytes()
    key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    return key, cert, list(extra)


def pkcs12_to_pem_files(location: str, password: str | None, directory: str) -> tuple[str, str]:
    """Write a PKCS12 keystore's chain and key as PEM files in ``directory``: ``(cert_path, key_path)``."""
    from cryptography.hazmat.primitives import serialization

    key, cert, extra = load_pkcs12(location, password)
    if key is None or cert is None:
        raise ValueError(f"{location} holds no private key and certificate")
    cert_path = os.path.join(directory, "chain.pem")
    key_path = os.path.join(directory, "key.pem")
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key_pem)
    Path(cert_path).write_bytes(chain)
    return cert_path, key_path


def load_pkcs12_truststore_pem(location: str, password: str | None) -> str:
    """The certificates of a PKCS12 truststore as one PEM string (for ``cadata=``)."""
    from cryptography.hazmat.primitives import serialization

    _key, cert, extra = load_pkcs12(location, password)
    certificates = ([cert] if cert is not None else []) + extra
    if not certificates:
        raise ValueError(f"{location} holds no certificates")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
