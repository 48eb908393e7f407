"""Where the API server is and how to authenticate: kubeconfig, in-cluster, or explicit flags.

Kubeconfig files are read by :mod:`grouper.kube.kubeconfig` (client-go's rules, no ``kubernetes`` package);
the HTTP traffic goes through :mod:`grouper.kube.transport`. Bearer tokens that rotate (projected
ServiceAccount tokens, exec plugins) are re-read by :meth:`ClusterConfig.refresh_token`, which the transport
calls on 401, and by :meth:`ClusterConfig.bearer` (a token file once a minute, an exec credential when it
expires).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouper.kube import kubeconfig as reader
from grouper.kube.kubeconfig import KubeConfigError

__all__ = ["ClusterConfig", "KubeConfigError", "explicit", "load"]

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # token, ca.crt, namespace


@dataclass
class ClusterConfig:
    """Connection settings for one API server."""

    server: str
    ca_file: str | None = None
    token: str | None = None
    token_file: str | None = None  # re-read on refresh (projected / bound tokens rotate)
    client_cert_file: str | None = None
    client_key_file: str | None = None
    verify_tls: bool = True
    source: str = "explicit"  # "kubeconfig:<path>", "in-cluster" or "explicit"
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"  # the kubeconfig context's namespace (in-cluster: the pod's), for CLI defaults
    ca_data: str | None = None  # PEM (a kubeconfig's certificate-authority-data), instead of ca_file
    tls_server_name: str | None = None  # the name to verify the server's certificate against, if not its host
    token_expires_at: float | None = None  # an exec credential's expirationTimestamp (epoch seconds)
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)  # for token_expires_at
    _token_read_at: float = field(default=0.0, repr=False)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        if not self.verify_tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.tls_server_name:
            ctx = _ServerNameContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names
            ctx.tls_server_name = self.tls_server_name
            if self.ca_file or self.ca_data:
                ctx.load_verify_locations(cafile=self.ca_file, cadata=self.ca_data)
            else:
                ctx.load_default_certs()
        else:
            ctx = (
                ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
                if self.ca_file or self.ca_data
                else ssl.create_default_context()
            )
        if self.client_cert_file:
            ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        return ctx

    def bearer(self) -> str | None:
        """The current bearer token, re-reading ``token_file`` at most once a minute and re-running an exec
        plugin once its credential has expired."""
        if self.token_file and (self.token is None or time.monotonic() - self._token_read_at > 60):
            self._read_token_file()
        elif self.token_expires_at is not None and self.clock() >= self.token_expires_at:
            self.refresh_token()
        return self.token

    def _read_token_file(self) -> None:
        assert self.token_file
        try:
            self.token = Path(self.token_file).read_text().strip()
        except OSError as e:
            raise KubeConfigError(f"cannot read token file {self.token_file}: {e}") from e
        self._token_read_at = time.monotonic()

    def refresh_token(self) -> bool:
        """Re-read rotating credentials after a 401; True when something may have changed."""
        if self.token_file:
            self._read_token_file()
            return True
        if self.kubeconfig is not None:
            # the file may hold a new token; an exec plugin mints a fresh one when run again
            fresh = _from_kubeconfig(self.kubeconfig or None, self.context)
            changed = fresh.token != self.token
            self.token, self.token_expires_at = fresh.token, fresh.token_expires_at
            return changed
        return False


class _ServerNameContext(ssl.SSLContext):
    """Verifies the server's certificate against ``tls_server_name`` (and sends it as SNI) whatever host
    the connection was opened to: a kubeconfig's ``tls-server-name``. asyncio (aiohttp and the HTTP/1.1
    pool alike) wraps every TLS connection through :meth:`wrap_bio`."""

    tls_server_name: str

    def wrap_bio(self, incoming: Any, outgoing: Any, server_side: bool = False,
                 server_hostname: Any = None, session: Any = None) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.tls_server_name, session)


def explicit(
    server: str,
    *,
    token: str | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
    insecure: bool = False,
) -> ClusterConfig:
    """Settings given directly (flags ``--server``, ``--token-file``, ``--certificate-authority``)."""
    cfg = ClusterConfig(
        server=server.rstrip("/"),
        ca_file=ca_file,
        token=token,
        token_file=token_file,
        verify_tls=not insecure,
        source="explicit",
    )
    if token_file:
        cfg._read_token_file()
    return cfg


def _from_kubeconfig(path: str | None, context: str | None, env: Mapping[str, str] | None = None) -> ClusterConfig:
    paths, must_exist = reader.kubeconfig_paths(path, os.environ if env is None else env)
    return _from_merged(reader.merge(paths, must_exist=must_exist), path, context)


def _from_merged(merged: reader.Merged, path: str | None, context: str | None) -> ClusterConfig:
    r = reader.resolve(merged, context)
    cfg = ClusterConfig(
        server=r.server,
        ca_file=r.ca_file,
        ca_data=r.ca_data,
        tls_server_name=r.tls_server_name,
        token=r.token,
        token_file=r.token_file,
        client_cert_file=r.client_cert_file,
        client_key_file=r.client_key_file,
        verify_tls=not r.insecure,
        source="kubeconfig:" + os.pathsep.join(r.files),
        kubeconfig=path or "",
        context=context,
        namespace=r.namespace,
    )
    if r.exec is not None:
        cred = reader.run_exec(r.exec, r.exec_cluster)
        if cred.token:
            cfg.token = cred.token
        if cred.client_certificate_data and cred.client_key_data:
            # read once, when the transport builds its TLS context (client-go rotates these; we don't)
            cfg.client_cert_file = reader.private_file(cred.client_certificate_data.encode(), ".crt")
            cfg.client_key_file = reader.private_file(cred.client_key_data.encode(), ".key")
        cfg.token_expires_at = cred.expires_at
    if cfg.token_file:
        cfg._read_token_file()  # as client-go: a tokenFile's content takes precedence over a token
    return cfg


def in_cluster(env: Mapping[str, str] | None = None, sa_dir: str = IN_CLUSTER_DIR) -> ClusterConfig:
    """The pod's ServiceAccount, as client-go's ``rest.InClusterConfig``."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                              "must both be set")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    ca = Path(sa_dir, "ca.crt")
    cfg = ClusterConfig(
        server=f"https://{host}:{port}",
        ca_file=str(ca) if ca.is_file() else None,  # client-go, too, goes on without it (system roots)
        token_file=str(Path(sa_dir, "token")),
        source="in-cluster",
    )
    cfg._read_token_file()
    ns_file = Path(sa_dir, "namespace")
    if ns_file.is_file():
        cfg.namespace = ns_file.read_text().strip() or "default"
    return cfg


def load(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """Resolve settings like kubectl/client-go: ``--kubeconfig``, else ``$KUBECONFIG`` / ``~/.kube/config``
    when they hold anything, else the in-cluster ServiceAccount."""
    paths, must_exist = reader.kubeconfig_paths(kubeconfig, os.environ)
    merged = reader.merge(paths, must_exist=must_exist)
    if kubeconfig or not merged.empty():
        return _from_merged(merged, kubeconfig, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    raise KubeConfigError(
        "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster"
    )
