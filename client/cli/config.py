"""Connection settings of the ``kafkakit`` command: ``--bootstrap-server``, ``--command-config`` and ``--property``.

``--command-config`` takes the file Kafka's own tools take: a Java ``.properties``
file (or TOML) with Kafka client setting names (``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``...),
mapped here onto kafkakit's keyword arguments. librdkafka's names
(``ssl.ca.location``, ``sasl.username``...) are accepted too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafkakit.errors import KafkaConfigError

BOOTSTRAP_ENV = "KAFKAKIT_BOOTSTRAP_SERVERS"

__all__ = [
    "BOOTSTRAP_ENV",
    "UsageError",
    "client_settings",
    "parse_properties",
    "read_command_config",
    "read_properties_text",
]


class UsageError(Exception):
    """A bad flag, flag combination or setting: the command exits with status 2."""


def read_properties_text(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations and escapes (as java.util.Properties reads them)."""
    result: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key_end = len(line)
        index = 0
        while index < len(line):
            char = line[index]
            if char == "\\":
                index += 2
                continue
            if char in "=: \t":
                key_end = index
                break
            index += 1
        key = line[:key_end]
        rest = line[key_end:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        result[_unescape(key)] = _unescape(rest)
    return result


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            nxt = text[index + 1]
            if nxt == "u" and index + 6 <= len(text):
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """TOML reads ``security.protocol = "SSL"`` as nested tables: join them back into dotted names."""
    flat: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        elif isinstance(value, bool):
            flat[name] = "true" if value else "false"
        else:
            flat[name] = str(value)
    return flat


def read_command_config(path: str) -> dict[str, str]:
    """The settings of a ``--command-config`` file (TOML when it ends in ``.toml``, else .properties)."""
    file = Path(path)
    try:
        text = file.read_text("utf-8")
    except OSError as exc:
        raise UsageError(f"--command-config: cannot read {path}: {exc.strerror or exc}") from None
    if file.suffix.lower() == ".toml":
        try:
            return _flatten(tomllib.loads(text))
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"--command-config: {path} is not valid TOML: {exc}") from None
    return read_properties_text(text)


def parse_properties(items: Sequence[str] | None, flag: str = "--property") -> dict[str, str]:
    """``["k=v", ...]`` from repeated ``--property`` flags; a malformed item is a usage error."""
    props: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected key=value")
        props[key.strip()] = value
    return props


def _bool(setting: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise UsageError(f"{setting}: expected true or false, got {value!r}")


def _int(setting: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise UsageError(f"{setting}: expected an integer, got {value!r}") from None


def bool_setting(setting: str, value: str) -> bool:
    """``true``/``false`` (any case) or a usage error naming ``setting``."""
    return _bool(setting, value)


def int_setting(setting: str, value: str) -> int:
    """An integer or a usage error naming ``setting``."""
    return _int(setting, value)


# Kafka client names that map one-to-one onto a kafkakit keyword argument.
_DIRECT: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "security.protocol": ("security_protocol", lambda _s, v: v.strip().upper()),
    "sasl.mechanism": ("sasl_mechanism", lambda _s, v: v.strip().upper()),
    "sasl.mechanisms": ("sasl_mechanism", lambda _s, v: v.strip().upper()),  # librdkafka
    "sasl.username": ("sasl_plain_username", lambda _s, v: v),  # librdkafka
    "sasl.password": ("sasl_plain_password", lambda _s, v: v),  # librdkafka
    "client.id": ("client_id", lambda _s, v: v),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
}
_SSL_KEYS = {
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
    "ssl.ca.location",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
}
# Accepted and ignored: they describe the JVM client or its defaults, not a connection choice.
_IGNORED = {"bootstrap.servers", "sasl.login.callback.handler.class", "ssl.protocol", "ssl.enabled.protocols"}


def client_settings(
    config: Mapping[str, str], *, warn: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """kafkakit keyword arguments (security, client id, timeouts) for Kafka-named ``config``.

    Raises :class:`UsageError` for a value that cannot work (a JKS store, an
    unparsable JAAS entry); unknown names are reported through ``warn`` and
    ignored, as Kafka's tools do.
    """
    warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
    settings: dict[str, Any] = {}
    for key, value in config.items():
        if key in _DIRECT:
            name, convert = _DIRECT[key]
            settings[name] = convert(key, value)
        elif key == "sasl.jaas.config":
            settings.update(_jaas_settings(value))
        elif key in _SSL_KEYS or key in _IGNORED:
            continue
        else:
            warn(f"the setting {key!r} is not used by kafkakit and was ignored")
    if str(settings.get("security_protocol", "PLAINTEXT")).endswith("SSL"):
        settings["ssl_context"] = _ssl_context(config)
    return settings


def _jaas_settings(value: str) -> dict[str, Any]:
    from kafkakit.security.jaas import parse_jaas_config

    try:
        entry = parse_jaas_config(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = entry.options
    if "username" in options or "password" in options:
        return {
            "sasl_plain_username": options.get("username"),
            "sasl_plain_password": options.get("password"),
        }
    subject = options.get("unsecuredLoginStringClaim_sub")
    if subject is not None:
        from kafkakit.security.oauthbearer import unsecured_token

        return {"sasl_oauth_token_provider": lambda: unsecured_token(subject)}
    raise UsageError(
        "sasl.jaas.config: expected username/password options (PLAIN, SCRAM) "
        "or unsecuredLoginStringClaim_sub (OAUTHBEARER)"
    )


def _ssl_context(config: Mapping[str, str]) -> Any:
    from kafkakit.security.tls import create_ssl_context, load_pkcs12_truststore_pem

    cafile = config.get("ssl.ca.location")
    cadata: str | None = None
    truststore = config.get("ssl.truststore.location")
    if truststore:
        kind = config.get("ssl.truststore.type", "PEM" if truststore.endswith(".pem") else "PKCS12").upper()
        if kind == "PEM":
            cafile = truststore
        elif kind == "PKCS12":
            try:
                cadata = load_pkcs12_truststore_pem(truststore, config.get("ssl.truststore.password"))
            except (OSError, ValueError) as exc:
                raise UsageError(f"ssl.truststore.location: cannot read {truststore}: {exc}") from None
        else:
            raise UsageError(f"ssl.truststore.type: {kind} stores are not supported; use PEM or PKCS12")
    certfile = config.get("ssl.keystore.location") or config.get("ssl.certificate.location")
    keyfile = config.get("ssl.key.location")
    keystore_type = config.get("ssl.keystore.type", "").upper()
    if keystore_type == "JKS":
        raise UsageError("ssl.keystore.type: JKS stores are not supported; use PEM or PKCS12")
    password = config.get("ssl.keystore.password") or config.get("ssl.key.password")
    check_hostname = config.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https"
    try:
        return create_ssl_context(
            cafile=cafile,
            cadata=cadata,
            certfile=certfile,
            keyfile=keyfile,
            password=password,
            check_hostname=check_hostname,
        )
    except (OSError, ValueError) as exc:
        raise UsageError(f"ssl settings: {exc}") from None


def connection_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``bootstrap_servers`` plus the ``--command-config`` settings for a client of this command."""
    file_config = read_command_config(args.command_config) if args.command_config else {}
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or file_config.get("bootstrap.servers")
    if not bootstrap:
        raise UsageError(f"--bootstrap-server is required (or set {BOOTSTRAP_ENV})")
    settings = client_settings(file_config)
    settings["bootstrap_servers"] = [s.strip() for s in bootstrap.split(",") if s.strip()]
    return settings


def check_known(props: Mapping[str, str], known: Sequence[str], flag: str = "--property") -> None:
    """A usage error naming the first property not in ``known``."""
    for key in props:
        if key not in known:
            raise UsageError(
                f"{flag} {key!r} is not a known setting here; expected one of {', '.join(known)}"
            )


def config_error_message(exc: KafkaConfigError) -> str:
    """How a client's rejected setting is reported (it names the setting)."""
    return f"invalid setting {exc.setting}: {exc}"


def open_admin(args: argparse.Namespace) -> Any:
    """An unstarted :class:`kafkakit.Admin` for this command's connection settings."""
    from kafkakit.admin import Admin

    return Admin(**connection_settings(args))


#: How long a producing command waits for the broker to auto-create a missing topic
#: (Kafka creates one in well under a second; waiting max.block.ms would hide a typo).
AUTO_CREATE_WAIT_S = 5.0


async def ensure_topic_for_producing(args: argparse.Namespace, producer: Any) -> None:
    """Fail fast on a topic that does not exist and that the broker will not auto-create.

    Like kafka-console-producer, a missing topic is created when the broker allows it
    (``auto.create.topics.enable``); unlike it, a broker that refuses answers within
    seconds with UNKNOWN_TOPIC_OR_PARTITION instead of after ``max.block.ms``.
    """
    from kafkakit.errors import UnknownTopicOrPartitionError

    async with open_admin(args) as admin:
        try:
            await admin.describe_topics([args.topic])
            return
        except UnknownTopicOrPartitionError:
            pass
    try:
        await asyncio.wait_for(producer.partitions_for(args.topic), AUTO_CREATE_WAIT_S)
    except (UnknownTopicOrPartitionError, TimeoutError):
        raise UnknownTopicOrPartitionError(
            f"topic {args.topic!r} does not exist and the broker did not create it "
            "(auto.create.topics.enable=false?); create it with `kafkakit topics create`"
        ) from None


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """``--output table|json`` for list and describe commands."""
    parser.add_argument(
        "--output", choices=("table", "json"), default="table", help="table (default) or JSON on stdout"
    )
