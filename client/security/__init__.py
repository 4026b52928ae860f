"""kafkakit.security: TLS contexts and SASL mechanism codecs, with no I/O.

The bottom layer that both the client's connections (``kafkakit.net``) and
broker_min's authenticator build on, as Kafka's client and broker share
``org.apache.kafka.common.security``:

- ``tls``: :func:`create_ssl_context` and certificate/key loading (PEM, PKCS12).
- ``plain``: the PLAIN message (RFC 4616).
- ``scram``: SCRAM-SHA-256/512 (RFC 5802, 7677): credentials, the client and
  server exchanges.
- ``oauthbearer``: the OAUTHBEARER client message (RFC 7628, KIP-255/342),
  unsecured JWS tokens and signed-token validation.
- ``jaas``: Kafka's JAAS configuration strings.
"""
