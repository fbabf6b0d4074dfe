"""Security: authentication providers and the binary handshake (``auth/``), authorization,
TLS contexts and connection limits, grouped by ``BrokerSecurity``."""
