"""broker_min's listener settings: parsing, advertising, and errors that name the setting."""

from __future__ import annotations

import pytest
from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.security.listeners import (
    Listener,
    advertised_endpoints,
    configured_listeners,
    parse_listeners,
    parse_protocol_map,
)
from kafkakit.errors import KafkaConfigError


def test_default_is_one_plaintext_listener_on_the_given_address() -> None:
    assert configured_listeners(BrokerConfig(), "127.0.0.1", 9092) == [
        Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
    ]


def test_several_listeners_with_custom_names() -> None:
    config = BrokerConfig(
        listeners="INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        advertised_listeners="EXTERNAL://kafka.example.com:19093",
    )
    listeners = configured_listeners(config, "ignored", 1)
    assert [(lst.name, lst.security_protocol, lst.port) for lst in listeners] == [
        ("INTERNAL", "PLAINTEXT", 9092),
        ("EXTERNAL", "SASL_SSL", 9093),
    ]
    assert listeners[1].uses_ssl and listeners[1].uses_sasl and not listeners[0].uses_ssl
    assert advertised_endpoints(config, listeners) == {
        "INTERNAL": ("127.0.0.1", 9092),
        "EXTERNAL": ("kafka.example.com", 19093),
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("PLAINTEXT//127.0.0.1:9092", "expected NAME://host:port"),
        ("PLAINTEXT://127.0.0.1", "expected NAME://host:port"),
        ("NOPE://127.0.0.1:1", "not in listener.security.protocol.map"),
        ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "named twice"),
        ("", "no listener given"),
    ],
)
def test_bad_listeners_name_the_setting(text: str, message: str) -> None:
    with pytest.raises(KafkaConfigError, match=message) as info:
        parse_listeners(text, parse_protocol_map(BrokerConfig().listener_security_protocol_map))
    assert info.value.setting == "listeners"


def test_bad_protocol_map_names_the_setting() -> None:
    with pytest.raises(KafkaConfigError) as info:
        parse_protocol_map("CLIENT:TLS")
    assert info.value.setting == "listener.security.protocol.map"


def test_listener_scoped_settings_are_kept_verbatim() -> None:
    config = BrokerConfig.from_strings(
        {"listener.name.SASL_SSL.plain.sasl.jaas.config": 'x required user_a="b";', "super.users": "User:a;User:b"}
    )
    assert config.listener_setting("sasl_ssl", "plain.sasl.jaas.config") == 'x required user_a="b";'
    assert config.super_user_set() == {"User:a", "User:b"}
    with pytest.raises(KafkaConfigError):
        BrokerConfig.from_strings({"listener.name.nothing": "x"})
