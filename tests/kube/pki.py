"""A throwaway CA and the certificates the control plane needs, made with the openssl CLI.

The venv has no `cryptography`, and openssl is on every machine the tests run on. Certificates carry
the extensions strict verifiers (Go, Python 3.13's VERIFY_X509_STRICT) insist on: SAN, key usage,
subject and authority key ids.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_DAYS = "7"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _config(path: Path, extensions: list[str]) -> Path:
    # A self-contained config, so the system openssl.cnf cannot add or clash with extensions.
    path.write_text("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n[ext]\n" + "\n".join(extensions) + "\n")
    return path


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "fireflow-test-ca") -> None:
        self.directory = directory
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        _new_key(self.pair.key)
        config = _config(
            directory / "ca.cnf",
            [
                "basicConstraints = critical, CA:TRUE",
                "keyUsage = critical, keyCertSign, cRLSign, digitalSignature",
                "subjectKeyIdentifier = hash",
            ],
        )
        _openssl(
            "req", "-new", "-x509", "-config", str(config), "-extensions", "ext", "-key", str(self.pair.key),
            "-subj", f"/CN={name}", "-days", _DAYS, "-out", str(self.pair.cert),
        )  # fmt: skip

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> KeyPair:
        """A leaf certificate: a server one when names or IPs are given, a client one otherwise."""
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        _new_key(pair.key)
        subject = "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"
        extensions = [
            "basicConstraints = critical, CA:FALSE",
            "keyUsage = critical, digitalSignature",
            "subjectKeyIdentifier = hash",
            "authorityKeyIdentifier = keyid",
        ]
        sans = [f"DNS:{dns}" for dns in server_names] + [f"IP:{ip}" for ip in server_ips]
        if sans:
            extensions += ["extendedKeyUsage = serverAuth", "subjectAltName = " + ", ".join(sans)]
        else:
            extensions.append("extendedKeyUsage = clientAuth")
        config = _config(self.directory / f"{name}.cnf", extensions)
        _openssl(
            "req", "-new", "-x509", "-config", str(config), "-extensions", "ext", "-key", str(pair.key),
            "-subj", subject, "-days", _DAYS, "-CA", str(self.pair.cert), "-CAkey", str(self.pair.key),
            "-out", str(pair.cert),
        )  # fmt: skip
        return pair


def service_account_keys(directory: Path) -> KeyPair:
    """The RSA pair the API server signs service-account tokens with (`cert` holds the public key)."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(pair.key))
    pair.key.chmod(0o600)
    _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
    return pair
