"""Where the API server is and how to authenticate: kubeconfig, in-cluster, or explicit flags.

The official ``kubernetes`` package is used only to *read* kubeconfig / in-cluster settings (it
understands contexts, exec plugins, embedded certificate data); the HTTP traffic goes through
:mod:`grouper.kube.transport`. Bearer tokens that rotate (projected ServiceAccount tokens, exec
plugins) are re-read by :meth:`ClusterConfig.refresh_token`, which the transport calls on 401 and
periodically.
"""

from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes.client
import kubernetes.config
from kubernetes.config.config_exception import ConfigException

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class KubeConfigError(RuntimeError):
    """No usable cluster connection settings."""


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
    _token_read_at: float = field(default=0.0, repr=False)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        if not self.verify_tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = (
                ssl.create_default_context(cafile=self.ca_file)
                if self.ca_file
                else ssl.create_default_context()
            )
        if self.client_cert_file:
            ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        return ctx

    def bearer(self) -> str | None:
        """The current bearer token, re-reading ``token_file`` at most once a minute."""
        if self.token_file and (self.token is None or time.monotonic() - self._token_read_at > 60):
            self._read_token_file()
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
            # exec plugins / OIDC providers mint a fresh token when the kubeconfig is loaded again
            fresh = _from_kubeconfig(self.kubeconfig or None, self.context)
            changed = fresh.token != self.token
            self.token = fresh.token
            return changed
        return False


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


def _from_kubeconfig(path: str | None, context: str | None) -> ClusterConfig:
    c = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(
            config_file=path, context=context, client_configuration=c, persist_config=False
        )
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=path)
    except (ConfigException, OSError, TypeError, ValueError) as e:
        raise KubeConfigError(f"cannot load kubeconfig {path or '(default)'}: {e}") from e
    chosen = next((x for x in contexts or [] if x.get("name") == context), active) if context else active
    auth = c.api_key.get("authorization") or c.api_key.get("BearerToken") or ""
    token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else (auth or None)
    return ClusterConfig(
        server=str(c.host).rstrip("/"),
        ca_file=c.ssl_ca_cert,
        token=token,
        client_cert_file=c.cert_file,
        client_key_file=c.key_file,
        verify_tls=bool(c.verify_ssl),
        source=f"kubeconfig:{path or os.environ.get('KUBECONFIG') or '~/.kube/config'}",
        kubeconfig=path or "",
        context=context,
        namespace=str(((chosen or {}).get("context") or {}).get("namespace") or "default"),
    )


def _in_cluster() -> ClusterConfig:
    c = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=c, try_refresh_token=False)
    except ConfigException as e:
        raise KubeConfigError(f"not running in a cluster: {e}") from e
    cfg = ClusterConfig(
        server=str(c.host).rstrip("/"),
        ca_file=c.ssl_ca_cert,
        token_file=IN_CLUSTER_TOKEN,
        source="in-cluster",
    )
    cfg._read_token_file()
    ns_file = Path(IN_CLUSTER_NAMESPACE)
    if ns_file.is_file():
        cfg.namespace = ns_file.read_text().strip() or "default"
    return cfg


def load(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """Resolve settings like kubectl/client-go: ``--kubeconfig``, else ``$KUBECONFIG`` / ``~/.kube/config``
    when present, else the in-cluster ServiceAccount."""
    if kubeconfig:
        return _from_kubeconfig(kubeconfig, context)
    env = os.environ.get("KUBECONFIG")
    if env or Path("~/.kube/config").expanduser().is_file():
        return _from_kubeconfig(None, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster()
    raise KubeConfigError(
        "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster"
    )
