"""The relay's TLS certificate: made once in the state folder (user-only), renewed before it expires.

ECDSA P-256, valid at most 14 days: what a browser accepts when it pins the certificate by its
SHA-256 hash (WebTransport's ``serverCertificateHashes``), so no certificate authority is needed.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from tatolab._safe_fs import open_own_file, write_private_file

VALIDITY = datetime.timedelta(days=13)  # browsers refuse pinned certificates valid for more than 14 days
RENEW_BEFORE = datetime.timedelta(days=3)  # renewed this long before it expires (at start, or while running)
CERT_FILE = "moq-cert.pem"
KEY_FILE = "moq-key.pem"


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    fingerprint: str  # SHA-256 of the DER certificate, hex: what a browser pins
    not_after: datetime.datetime
    names: tuple[str, ...]

    def due(self, now: datetime.datetime | None = None) -> bool:
        """Should it be renewed now?"""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return self.not_after - now <= RENEW_BEFORE


def fingerprint_of(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def load(state: Path) -> Certificate | None:
    """The certificate kept in ``state``, or None when there is none (or it is unreadable)."""
    from cryptography import x509

    cert_path, key_path = state / CERT_FILE, state / KEY_FILE
    try:
        fd = open_own_file(cert_path, os.O_RDONLY, "the relay's certificate")
        with os.fdopen(fd, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        os.close(open_own_file(key_path, os.O_RDONLY, "the relay's private key"))
    except (OSError, ValueError):
        return None
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = tuple(str(n.value) for n in sans)
    except x509.ExtensionNotFound:
        names = ()
    return Certificate(cert_path, key_path, fingerprint_of(cert.public_bytes(Encoding.DER)),
                       cert.not_valid_after_utc, names)


def generate(state: Path, names: list[str], now: datetime.datetime | None = None) -> Certificate:
    """A new self-signed ECDSA P-256 certificate for ``names`` (host names and addresses) in ``state``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = now or datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "tatolab")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    write_private_file(state / KEY_FILE, key_pem, "the relay's private key")
    write_private_file(state / CERT_FILE, cert.public_bytes(serialization.Encoding.PEM), "the relay's certificate")
    loaded = load(state)
    assert loaded is not None
    return loaded


def ensure(state: Path, names: list[str], now: datetime.datetime | None = None) -> tuple[Certificate, bool]:
    """The kept certificate, or a new one when there is none, it is due, or it lacks one of
    ``names``; and whether it is new."""
    kept = load(state)
    if kept is not None and not kept.due(now) and set(names) <= set(kept.names):
        return kept, False
    return generate(state, names, now), True
