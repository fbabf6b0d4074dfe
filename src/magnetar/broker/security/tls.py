"""TLS for the broker's ``brokerServicePortTls`` listener: the SSLContext and its reload.

The context is built from Pulsar's keys: ``tlsCertificateFilePath`` and ``tlsKeyFilePath``
(PEM), ``tlsTrustCertsFilePath`` (the CAs client certificates must chain to),
``tlsRequireTrustedClientCertOnConnect`` (a client without a trusted certificate fails the
handshake; otherwise a certificate is asked for but optional, and an untrusted one still
fails), ``tlsAllowInsecureConnection`` (client certificates are not checked, which with
Python's ssl means they are not asked for: TLS authentication then cannot work),
``tlsProtocols`` (e.g. ``TLSv1.3,TLSv1.2``) and ``tlsCiphers``: the standard (IANA) suite
names a Pulsar ``broker.conf`` lists, as Java names them (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``),
or OpenSSL's (``ECDHE-RSA-AES256-GCM-SHA384``). Python cannot narrow the TLS 1.3 suites (all
of OpenSSL's are offered); a list of TLS 1.3 suites only means TLS 1.3 only.

Every ``tlsCertRefreshCheckDurationSec`` the files' modification times are compared; when one
changed, the new files are loaded into a scratch context first (so a half-written pair is
not used) and then into the live one, which new handshakes use. Trust is additive on reload:
a CA removed from the trust file stays trusted until a restart.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any

log = logging.getLogger(__name__)

_VERSIONS = {
    "TLSV1": ssl.TLSVersion.TLSv1, "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(ValueError):
    """TLS settings that cannot be used."""


def _protocol_range(protocols: list[str]) -> tuple[ssl.TLSVersion, ssl.TLSVersion] | None:
    if not protocols:
        return None
    versions = []
    for name in protocols:
        version = _VERSIONS.get(name.upper())
        if version is None:
            raise TlsConfigError(f"tlsProtocols: unknown protocol {name!r} (use TLSv1.2, TLSv1.3)")
        versions.append(version)
    return min(versions), max(versions)


#: TLS 1.3 suites: the same names in Java and OpenSSL, not settable through ``set_ciphers``.
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                          "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                          "TLS_AES_128_CCM_8_SHA256"})
_KEY_EXCHANGES = {"ECDHE_ECDSA": "ECDHE-ECDSA-", "ECDHE_RSA": "ECDHE-RSA-", "DHE_RSA": "DHE-RSA-",
                  "RSA": ""}
_BULK = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128",
         "AES_256_CBC": "AES256", "CHACHA20_POLY1305": "CHACHA20-POLY1305",
         "AES_128_CCM": "AES128-CCM", "AES_256_CCM": "AES256-CCM"}


def openssl_cipher_name(name: str) -> str:
    """The OpenSSL name of a TLS 1.2 suite given by its standard name (as Java and Pulsar's
    ``tlsCiphers`` write it); an OpenSSL name is returned as it is."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, rest = name[4:].split("_WITH_", 1)
    prefix = _KEY_EXCHANGES.get(exchange)
    bulk, _, mac = rest.rpartition("_")
    cipher = _BULK.get(bulk)
    if prefix is None or cipher is None:
        raise TlsConfigError(f"tlsCiphers: unsupported cipher suite {name!r}")
    if bulk == "CHACHA20_POLY1305" or bulk.endswith("CCM"):
        return prefix + cipher  # OpenSSL names these without the hash
    if bulk.endswith("CBC") and mac == "SHA":
        return f"{prefix}{cipher}-SHA"
    return f"{prefix}{cipher}-{mac}"


def _cipher_list(names: list[str]) -> tuple[str, bool]:
    """(OpenSSL cipher string of the TLS 1.2 suites, whether only TLS 1.3 suites were named)."""
    tls12 = [openssl_cipher_name(n) for n in names if n not in TLS13_SUITES]
    return ":".join(tls12), bool(names) and not tls12


def _file_stamp(paths: list[str]) -> tuple[float | None, ...]:
    stamps: list[float | None] = []
    for path in paths:
        try:
            stamps.append(os.stat(path).st_mtime_ns)
        except OSError:
            stamps.append(None)
    return tuple(stamps)


class TlsContextManager:
    """Owns the server SSLContext of the TLS listener and reloads its files."""

    def __init__(self, config: Any) -> None:
        from magnetar.broker.config.security_config import split_list

        self.cert_file = config.tlsCertificateFilePath
        self.key_file = config.tlsKeyFilePath
        self.trust_file = config.tlsTrustCertsFilePath
        self.require_client_cert = bool(config.tlsRequireTrustedClientCertOnConnect)
        self.allow_insecure = bool(config.tlsAllowInsecureConnection)
        self.protocols = _protocol_range(split_list(config.tlsProtocols))
        self.ciphers, self.tls13_only = _cipher_list(split_list(config.tlsCiphers))
        if self.require_client_cert and not self.trust_file:
            raise TlsConfigError(
                "tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath")
        self.context = self._build()
        self._stamp = _file_stamp(self._paths())
        self.reloads = 0

    def _paths(self) -> list[str]:
        return [p for p in (self.cert_file, self.key_file, self.trust_file) if p]

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if self.protocols is not None:
            ctx.minimum_version, ctx.maximum_version = self.protocols
        if self.tls13_only:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        if self.ciphers:
            try:
                ctx.set_ciphers(self.ciphers)
            except ssl.SSLError:
                raise TlsConfigError(
                    f"tlsCiphers: OpenSSL knows none of {self.ciphers!r}; name suites as "
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 or ECDHE-RSA-AES256-GCM-SHA384") from None
        self._load(ctx)
        if self.allow_insecure or not self.trust_file:
            ctx.verify_mode = ssl.CERT_NONE
        elif self.require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
        else:
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def _load(self, ctx: ssl.SSLContext) -> None:
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.trust_file:
                ctx.load_verify_locations(self.trust_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot load tlsCertificateFilePath/tlsKeyFilePath/tlsTrustCertsFilePath: {exc}"
            ) from None

    def reload_if_changed(self) -> bool:
        """Load the files again if one changed since the last load; True if reloaded."""
        stamp = _file_stamp(self._paths())
        if stamp == self._stamp:
            return False
        try:
            self._load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))  # a check, not the live one
            self._load(self.context)
        except TlsConfigError as exc:
            log.warning("TLS files changed but cannot be loaded yet (kept the old ones): %s", exc)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate, key and trust files reloaded")
        return True
