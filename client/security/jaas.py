"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule class> <flag> key="value" ...;``.

Parsed by hand because JAAS is a Java format with no Python library; only the
single-entry form Kafka accepts in ``sasl.jaas.config`` is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JaasEntry", "parse_jaas_config"]

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<semi>;)|(?P<eq>=)|(?P<word>[^\s=;"]+))')


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module entry: its class, control flag and options."""

    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"sasl.jaas.config: unexpected character at position {position}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        tokens.append((kind, value))
        position = match.end()
    return tokens


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse one ``sasl.jaas.config`` entry; ValueError names what is wrong (values are never echoed)."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise ValueError("sasl.jaas.config: expected '<LoginModule> <flag> key=\"value\" ... ;'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise ValueError(f"sasl.jaas.config: invalid control flag {flag!r}; expected one of {', '.join(_FLAGS)}")
    if tokens[-1][0] != "semi":
        raise ValueError("sasl.jaas.config: the entry must end with ';'")
    body = tokens[2:-1]
    if len(body) % 3:
        raise ValueError("sasl.jaas.config: options must be key=value pairs")
    options: dict[str, str] = {}
    for index in range(0, len(body), 3):
        key, equals, value = body[index : index + 3]
        if key[0] != "word" or equals[0] != "eq" or value[0] not in ("word", "quoted"):
            raise ValueError(f"sasl.jaas.config: malformed option near {key[1]!r}")
        options[key[1]] = value[1]
    return JaasEntry(module, flag, options)
