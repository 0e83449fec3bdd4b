"""Throw-away certificates, keys and kubeconfigs.

``make_pki`` creates the CA, kube-apiserver's serving certificate and the service-account
signing keys that ``ControlPlane`` writes to ``<workdir>/pki``; ``write_kubeconfig`` writes
a kubeconfig for one bearer token (admin, scheduler, service accounts).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    serving_cert_pem: bytes
    serving_key_pem: bytes
    sa_private_pem: bytes
    sa_public_pem: bytes


def make_pki() -> Pki:
    """A throw-away CA, a serving certificate for 127.0.0.1, and service-account keys."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=7)

    ca_key, ca_name, ca_cert = _certificate_authority("muster-local-ca", now, later)

    service_ip = next(ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE).hosts())
    names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    names += [
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(service_ip),
    ]
    key, cert = _serving_certificate("kube-apiserver", names, ca_key, ca_name, now, later)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return Pki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        serving_cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        serving_key_pem=_pkcs8(key),
        sa_private_pem=_pkcs8(sa_key),
        sa_public_pem=sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "muster-local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "muster-local", "context": {"cluster": "muster-local", "user": user}}
        ],
        "current-context": "muster-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class ServingPki:
    """A CA of its own and a serving certificate it signed (PEM), for a webhook server."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def make_serving_pki(common_name: str, ip: str = "127.0.0.1") -> ServingPki:
    """A throw-away CA and a serving certificate for ``ip`` (and ``localhost``) it signed:
    what a webhook server on loopback needs so that kube-apiserver can call it (the CA
    goes into the webhook's ``caBundle``)."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=7)
    ca_key, ca_name, ca_cert = _certificate_authority(f"{common_name}-ca", now, later)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(ip))]
    key, cert = _serving_certificate(common_name, names, ca_key, ca_name, now, later)
    return ServingPki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_pkcs8(key),
    )


def _certificate_authority(
    common_name: str, now: dt.datetime, later: dt.datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Name, x509.Certificate]:
    """A throw-away self-signed CA valid from ``now`` to ``later``: its key, name and
    certificate."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_name, ca_cert


@dataclass(frozen=True)
class MutualTlsPki:
    """A CA of its own, a serving certificate and a client certificate it signed (PEM):
    an extender served with mTLS, and kube-scheduler's certificate to call it with."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes

    def write(self, directory: Path) -> dict[str, Path]:
        """Each PEM in ``directory`` (``ca.crt``, ``tls.crt``, ``tls.key``, ``client.crt``,
        ``client.key``); returns the paths by those names."""
        directory.mkdir(parents=True, exist_ok=True)
        contents = {
            "ca.crt": self.ca_pem,
            "tls.crt": self.cert_pem,
            "tls.key": self.key_pem,
            "client.crt": self.client_cert_pem,
            "client.key": self.client_key_pem,
        }
        for name, pem in contents.items():
            (directory / name).write_bytes(pem)
        return {name: directory / name for name in contents}


def make_mutual_tls_pki(common_name: str, client_name: str, ip: str = "127.0.0.1") -> MutualTlsPki:
    """A throw-away CA, a serving certificate for ``ip`` (and ``localhost``) and a client
    certificate for ``client_name``, both signed by it."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=7)
    ca_key, ca_name, ca_cert = _certificate_authority(f"{common_name}-ca", now, later)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(ip))]
    key, cert = _serving_certificate(common_name, names, ca_key, ca_name, now, later)
    client_key, client_cert = _serving_certificate(
        client_name, [x509.DNSName(client_name)], ca_key, ca_name, now, later, client=True
    )
    return MutualTlsPki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_pkcs8(key),
        client_cert_pem=client_cert.public_bytes(serialization.Encoding.PEM),
        client_key_pem=_pkcs8(client_key),
    )


def _serving_certificate(
    common_name: str,
    names: Sequence[x509.GeneralName],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    now: dt.datetime,
    later: dt.datetime,
    *,
    client: bool = False,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and a server certificate for ``names`` (``client``: a client
    certificate), signed by the CA."""
    usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else None
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([usage or x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _pkcs8(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def records_key_dir(directory: Path) -> Path:
    """A directory of one random key for ``muster serve``/``evictor --records-key-dir``,
    made once under ``directory`` (every Muster and evictor of a plane shares it, as the
    replicas of an install share the chart's Secret)."""
    keys = directory / "muster-records-keys"
    key = keys / "key-1"
    if not key.exists():
        keys.mkdir(parents=True, exist_ok=True)
        key.write_text(secrets.token_hex(32))
    return keys
