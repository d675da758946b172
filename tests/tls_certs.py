"""Test certificates made with ``cryptography``: a private CA, a server certificate for
127.0.0.1/localhost, a client certificate, an expired server certificate, and a second CA
that signed none of them (the "wrong CA") but a server certificate of its own (a server
whose certificate the first CA's clients must refuse)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_KEY_PEM = serialization.PrivateFormat.TraditionalOpenSSL


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    expired_cert: Path
    expired_key: Path
    client_cert: Path
    client_key: Path
    expired_client_cert: Path
    expired_client_key: Path
    other_server_cert: Path  # for 127.0.0.1/localhost, signed by other_ca
    other_server_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
           issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
           server: bool = False, client: bool = False, expired: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    start, end = ((now - dt.timedelta(days=30), now - dt.timedelta(days=1)) if expired
                  else (now - dt.timedelta(hours=1), now + dt.timedelta(days=2)))
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey | None = None) -> tuple[Path, Path]:
    cert_path = directory / f"{stem}.pem"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, _KEY_PEM,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
    return cert_path, key_path


def make_pki(directory: Path) -> Pki:
    """Write every certificate and key of :class:`Pki` into ``directory``."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("kstage test CA", ca_key, _name("kstage test CA"), ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _issue("some other CA", other_key, _name("some other CA"), other_key, ca=True)
    ca, _ = _write(directory, "ca", ca_cert)
    other_ca, _ = _write(directory, "other-ca", other)
    foreign_key = ec.generate_private_key(ec.SECP256R1())
    foreign = _write(directory, "other-server", _issue(
        "127.0.0.1", foreign_key, other.subject, other_key, server=True), foreign_key)
    paths: dict[str, tuple[Path, Path]] = {}
    for stem, kind in (("server", "server"), ("expired", "server-expired"),
                       ("client", "client"), ("expired-client", "client-expired")):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue("127.0.0.1" if kind.startswith("server") else "kstage",
                      key, ca_cert.subject, ca_key, server=kind.startswith("server"),
                      client=kind.startswith("client"), expired=kind.endswith("expired"))
        paths[stem] = _write(directory, stem, cert, key)
    return Pki(ca=ca, other_ca=other_ca,
               server_cert=paths["server"][0], server_key=paths["server"][1],
               expired_cert=paths["expired"][0], expired_key=paths["expired"][1],
               client_cert=paths["client"][0], client_key=paths["client"][1],
               expired_client_cert=paths["expired-client"][0],
               expired_client_key=paths["expired-client"][1],
               other_server_cert=foreign[0], other_server_key=foreign[1])
