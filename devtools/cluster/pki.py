"""Throwaway PKI for the local control plane, made with the ``openssl`` command line tool.

- a CA (EC P-256, 10 years),
- a serving certificate for the API server signed by that CA, valid for 127.0.0.1 / localhost and the
  in-cluster names of the ``kubernetes`` Service,
- the service-account RSA key pair (``--service-account-signing-key-file`` / ``--service-account-key-file``),
- a CA of its own for admission webhook clients and the client certificate the API server presents to
  webhooks (:func:`webhook_client`): a webhook trusting that CA accepts the API server and nobody else.
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


def webhook_client(directory: Path, days: int = 3650) -> tuple[Path, Path, Path]:
    """A CA that signs only the API server's webhook client certificate, and that certificate: returns
    (CA certificate, client certificate, client key) paths. A CA of its own, not the cluster's: the cluster
    CA signs every user's and kubelet's client certificate, and none of them should pass as the API server."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "webhook-client-ca.key", "-out", "webhook-client-ca.crt",
        "-days", str(days), "-subj", "/CN=devcluster-webhook-client-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "webhook-client.key", "-out", "webhook-client.csr",
        "-subj", "/CN=kube-apiserver-webhook-client", cwd=d,
    )  # fmt: skip
    (d / "webhook-client.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "webhook-client.csr", "-CA", "webhook-client-ca.crt",
        "-CAkey", "webhook-client-ca.key", "-CAcreateserial", "-out", "webhook-client.crt",
        "-days", str(days), "-extfile", "webhook-client.ext",
        cwd=d,
    )  # fmt: skip
    for key in ("webhook-client-ca.key", "webhook-client.key"):
        (d / key).chmod(0o600)
    return d / "webhook-client-ca.crt", d / "webhook-client.crt", d / "webhook-client.key"
