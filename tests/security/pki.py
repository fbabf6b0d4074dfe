"""Certificates for the tests, made with ``cryptography`` (nothing is checked in).

``Pki(dir)`` writes a CA, a broker certificate it signs (CN=localhost, SAN localhost and
127.0.0.1) and, on demand, client certificates (the CN is the role); ``Pki(dir, "other")``
is an unrelated CA for "a certificate from another CA" tests.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Pki:
    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"test {name}")).issuer_name(_name(f"test {name}"))
            .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca_file = self.dir / f"{name}.pem"
        self.ca_file.write_bytes(self.ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, cn: str, server: bool = False, stem: str | None = None) -> tuple[Path, Path]:
        """(certificate file, key file) for ``cn``, signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn)).issuer_name(self.ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        stem = stem or f"{self.name}-{cn}"
        cert_file, key_file = self.dir / f"{stem}.cert.pem", self.dir / f"{stem}.key.pem"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        return cert_file, key_file
