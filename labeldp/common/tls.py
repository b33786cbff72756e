"""A development certificate authority for mTLS between the two parties (`labeldp keys dev-ca`).

Writes a CA, a server certificate for the features party's gRPC receiver (valid for the given host
names and IP addresses) and a client certificate for the labels party (and one for each of
``other_clients``: ``{name}.pem``, ``{name}-key.pem`` — the receiver tells peers apart by certificate).
For local use and tests only: production deployments bring certificates from their own CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class DevCertificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def _sign(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )
    for ext, critical in extensions:
        builder = builder.add_extension(ext, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def dev_ca(
    out: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), other_clients: tuple[str, ...] = ()
) -> DevCertificates:
    out.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("labeldp development CA")
    ca = _sign(
        "labeldp development CA",
        ca_key,
        ca_name,
        ca_key,
        [(x509.BasicConstraints(ca=True, path_length=0), True)],
    )
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    paths = DevCertificates(
        out / "ca.pem",
        out / "features-party.pem",
        out / "features-party-key.pem",
        out / "labels-party.pem",
        out / "labels-party-key.pem",
    )
    for cert_path, key_path, subject, usage, extra in (
        (
            paths.server_cert,
            paths.server_key,
            "features-party",
            ExtendedKeyUsageOID.SERVER_AUTH,
            [(x509.SubjectAlternativeName(sans), False)],
        ),
        (paths.client_cert, paths.client_key, "labels-party", ExtendedKeyUsageOID.CLIENT_AUTH, []),
        *(
            (out / f"{name}.pem", out / f"{name}-key.pem", name, ExtendedKeyUsageOID.CLIENT_AUTH, [])
            for name in other_clients
        ),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _sign(
            subject,
            key,
            ca_name,
            ca_key,
            [
                (x509.BasicConstraints(ca=False, path_length=None), True),
                (x509.ExtendedKeyUsage([usage]), False),
                *extra,
            ],
        )
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return paths
