"""Throwaway PKI for the local control plane, made with the ``openssl`` command line tool.

- a CA (EC P-256, 10 years),
- a serving certificate for the API server signed by that CA, valid for 127.0.0.1 / localhost and the
  in-cluster names of the ``kubernetes`` Service,
- the service-account RSA key pair (``--service-account-signing-key-file`` / ``--service-account-key-file``).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVING_SANS = (
    "IP:127.0.0.1",
    "IP:10.0.0.1",  # first address of --service-cluster-ip-range=10.0.0.0/24
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


class PkiError(RuntimeError):
    pass


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path  # RSA private key (PEM)
    sa_pub: Path  # RSA public key (PEM)


def _exe() -> str:
    exe = shutil.which("openssl")
    if not exe:
        raise PkiError(
            "the `openssl` command line tool is required to create the local cluster's certificates"
        )
    return exe


def _check(args: tuple[str, ...], res: subprocess.CompletedProcess[str]) -> None:
    if res.returncode != 0:
        raise PkiError(f"openssl {' '.join(args)} failed:\n{res.stderr.strip()}")


def _openssl(*args: str, cwd: Path) -> None:
    _check(args, subprocess.run([_exe(), *args], cwd=cwd, capture_output=True, text=True))


def generate(directory: Path, days: int = 3650) -> Pki:
    """Create a fresh CA, serving certificate and service-account key pair in ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    # the RSA key generation is the slow part: run it while the EC certificates are made
    rsa_args = ("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key")
    rsa = subprocess.Popen(
        [_exe(), *rsa_args], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(days),
        "-subj", "/CN=devcluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=d
    )
    (d / "apiserver.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(SERVING_SANS)}\n"
    )
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "apiserver.crt", "-days", str(days), "-extfile", "apiserver.ext",
        cwd=d,
    )  # fmt: skip
    out, err = rsa.communicate()
    _check(rsa_args, subprocess.CompletedProcess(rsa.args, rsa.returncode, out, err))
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    for key in ("ca.key", "apiserver.key", "sa.key"):
        (d / key).chmod(0o600)
    return Pki(
        dir=d,
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        serving_cert=d / "apiserver.crt",
        serving_key=d / "apiserver.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
    )


def issue_serving_cert(
    ca: Pki,
    directory: Path,
    name: str,
    sans: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost"),
    days: int = 30,
) -> tuple[Path, Path]:
    """A serving certificate signed by the cluster's CA, e.g. for an admission webhook the API server calls
    over 127.0.0.1 (its caBundle is then ``ca.ca_cert``). Returns (certificate, key) paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(sans)}\n"
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.ca_cert), "-CAkey", str(ca.ca_key),
        "-CAcreateserial", "-out", f"{name}.crt", "-days", str(days), "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip
    (d / f"{name}.key").chmod(0o600)
    return d / f"{name}.crt", d / f"{name}.key"
