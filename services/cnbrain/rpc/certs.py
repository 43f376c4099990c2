"""A local development CA and, per brain, one certificate for mutual TLS between brains.

Layout of the directory (what `PeerSecurity.from_dir` reads):

    ca.pem, ca-key.pem        the CA (reused when both files are already there)
    NAME.pem, NAME-key.pem    per name: a certificate signed by the CA, good both as server and
                              as client certificate (extended key usage serverAuth and
                              clientAuth; subject alternative names NAME, localhost, 127.0.0.1)

Keys are ECDSA P-256 in unencrypted PKCS#8 PEM, written with mode 0600. For development and
tests only: a production deployment gets its certificates from its own CA.
"""

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cnbrain.rpc.security import CA_FILE, cert_file_name, key_file_name

CA_KEY_FILE = "ca-key.pem"
DEFAULT_NAMES: tuple[str, ...] = ("national", "east", "west", "north", "south")
"""The national brain and the four regions of the built-in map."""
CA_COMMON_NAME = "cnbrain development CA"

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class WrittenCertificates:
    """What `write_certificates` wrote: the CA's files and, per name, (cert, key)."""

    ca_file: Path
    ca_key_file: Path
    created_ca: bool
    peers: dict[str, tuple[Path, Path]]


def write_certificates(
    out: Path, names: Sequence[str] = DEFAULT_NAMES, *, days: int = 365
) -> WrittenCertificates:
    """Write the CA (unless `out` has one) and a certificate and key for every name, valid
    for `days` days (never past the CA's own expiry). Existing per-name files are replaced.

    Names must be DNS labels (lower-case letters, digits, inner hyphens) other than "ca" and
    given once; `days` must be at least 1. Raises ValueError for either.
    """
    _check(names, days)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_path, ca_key_path = out / CA_FILE, out / CA_KEY_FILE
    created_ca = not (ca_path.is_file() and ca_key_path.is_file())
    if created_ca:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, now, days)
        _write_key(ca_key_path, ca_key)
        ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    else:
        ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_path} is not an EC private key")
        ca_key = loaded
    peers: dict[str, tuple[Path, Path]] = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _peer_certificate(name, key, ca_cert, ca_key, now, days)
        cert_path, key_path = out / cert_file_name(name), out / key_file_name(name)
        _write_key(key_path, key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        peers[name] = (cert_path, key_path)
    return WrittenCertificates(ca_path, ca_key_path, created_ca, peers)


def _check(names: Sequence[str], days: int) -> None:
    if days < 1:
        raise ValueError(f"days must be at least 1, not {days}")
    if not names:
        raise ValueError("no names")
    for name in names:
        if not _NAME.fullmatch(name) or name == "ca":
            raise ValueError(
                f"bad name {name!r}: use a DNS label (a-z, 0-9, inner '-') other than 'ca'"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"names given twice: {sorted({n for n in names if names.count(n) > 1})}")


def _ca_certificate(
    key: ec.EllipticCurvePrivateKey, now: dt.datetime, days: int
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    not_after = now + dt.timedelta(days=days)
    return _builder(subject, subject, key.public_key(), now, not_after, ca=True).sign(
        key, hashes.SHA256()
    )


def _peer_certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    days: int,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    alt_names = x509.SubjectAlternativeName(
        [
            x509.DNSName(name),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        ]
    )
    return (
        _builder(subject, ca_cert.subject, key.public_key(), now, not_after, ca=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(alt_names, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public: ec.EllipticCurvePublicKey,
    now: dt.datetime,
    not_after: dt.datetime,
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What the CA's and the peers' certificates share: a fresh serial number, validity from
    `now` (less the clock skew) to `not_after`, the basic constraints and key usage of a CA
    (signs certificates and CRLs) or of a TLS peer (signs, agrees keys), and the subject key
    identifier."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=not ca,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Write `key` readable by its owner only, also when the file existed with other modes."""
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(data)
