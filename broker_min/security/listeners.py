"""Listeners: ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``.

A listener is a name (``PLAINTEXT``, ``SASL_SSL``, ``CLIENT``...), an address to
bind and a security protocol found through the protocol map, exactly as in
Kafka: ``listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093``.
Metadata answers each connection with the advertised address of the listener
it came in on, so clients stay on the security protocol they chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkakit.broker.config import BrokerConfig
from kafkakit.errors import KafkaConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``name://host:port`` speaking ``security_protocol``."""

    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(text: str) -> dict[str, str]:
    """``"CLIENT:SASL_SSL,PLAINTEXT:PLAINTEXT"`` -> {listener name: security protocol}."""
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(
                "listener.security.protocol.map",
                f"bad entry {item!r}: expected NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_listeners(text: str, protocols: dict[str, str], setting: str = "listeners") -> list[Listener]:
    """``"NAME://host:port,..."`` -> listeners; each name must be in the protocol map, and unique."""
    listeners: list[Listener] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, address = item.partition("://")
        host, colon, port_text = address.rpartition(":")
        name = name.strip().upper()
        if not sep or not colon or not port_text.isdigit():
            raise KafkaConfigError(setting, f"bad listener {item!r}: expected NAME://host:port")
        if name not in protocols:
            raise KafkaConfigError(
                setting, f"listener {name} is not in listener.security.protocol.map ({', '.join(protocols)})"
            )
        if any(existing.name == name for existing in listeners):
            raise KafkaConfigError(setting, f"listener {name} is named twice")
        port = int(port_text)
        if port > 65535:
            raise KafkaConfigError(setting, f"bad port in {item!r}")
        listeners.append(Listener(name, host.strip("[]"), port, protocols[name]))
    if not listeners:
        raise KafkaConfigError(setting, "no listener given")
    return listeners


def configured_listeners(config: BrokerConfig, host: str, port: int) -> list[Listener]:
    """The listeners to bind: ``config.listeners``, or one PLAINTEXT listener on ``host:port``."""
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    if config.listeners is None:
        return [Listener("PLAINTEXT", host, port, protocols.get("PLAINTEXT", "PLAINTEXT"))]
    if not config.cluster_mode:
        return parse_listeners(config.listeners, protocols)
    # In cluster mode the controller listener (the quorum's voter address) is served by the
    # Raft endpoint, not by the broker; Kafka's own configs map it to PLAINTEXT.
    controller = config.controller_listener_set()
    for name in controller:
        protocols.setdefault(name, "PLAINTEXT")
    listeners = parse_listeners(config.listeners, protocols)
    for lst in listeners:
        if lst.name in controller and lst.security_protocol != "PLAINTEXT":
            raise KafkaConfigError(
                "listener.security.protocol.map", f"controller listener {lst.name}: only PLAINTEXT is supported yet"
            )
    brokers = [lst for lst in listeners if lst.name not in controller]
    if not brokers:
        raise KafkaConfigError("listeners", "no broker listener besides the controller listener")
    return brokers


def advertised_endpoints(
    config: BrokerConfig, bound: list[Listener]
) -> dict[str, tuple[str, int]]:
    """Listener name -> (host, port) to advertise: ``advertised.listeners`` over the bound addresses.

    A bound host of ``0.0.0.0`` or empty is advertised as ``advertised_host`` (or 127.0.0.1),
    as no client can connect to the wildcard address.
    """
    fallback = config.advertised_host or "127.0.0.1"
    endpoints = {
        lst.name: (lst.host if lst.host not in ("", "0.0.0.0", "::") else fallback, lst.port) for lst in bound
    }
    if config.advertised_host is not None and config.listeners is None:
        endpoints = {name: (config.advertised_host, port) for name, (_, port) in endpoints.items()}
    if config.advertised_listeners:
        protocols = parse_protocol_map(config.listener_security_protocol_map)
        for lst in parse_listeners(config.advertised_listeners, protocols, "advertised.listeners"):
            if lst.name not in endpoints:
                raise KafkaConfigError("advertised.listeners", f"listener {lst.name} is not in listeners")
            endpoints[lst.name] = (lst.host, lst.port or endpoints[lst.name][1])
    return endpoints
