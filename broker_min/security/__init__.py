"""broker_min's security: listeners, TLS, SASL authentication, SCRAM credentials and the authorizer."""
