"""Reading kubeconfig files the way client-go's ``clientcmd`` does, for the cases people use.

This replaces the official ``kubernetes`` package, which the grouper used only for this and which cost
about a second of start-up (its import) and 126 MB of the image.

What is read, as client-go reads it:

- which files: ``--kubeconfig`` alone (it must exist); else every path of ``$KUBECONFIG`` (separated by
  ``os.pathsep``, duplicates and missing files skipped); else ``~/.kube/config`` (missing is an empty config);
- merging: the first file that defines a cluster, user or context name wins; ``current-context`` comes from
  the first file that sets it; relative paths (``certificate-authority``, ``client-certificate``,
  ``client-key``, ``tokenFile``, an ``exec`` command containing a ``/``) are relative to the folder of the
  file that wrote them;
- clusters: ``server``, ``certificate-authority`` / ``-data``, ``insecure-skip-tls-verify``,
  ``tls-server-name``; users: ``token``, ``tokenFile``, ``client-certificate`` / ``client-key`` and their
  ``-data``, ``exec`` (ExecCredential ``client.authentication.k8s.io/v1`` and ``v1beta1``); the context's
  ``namespace``.

Refused with an error rather than silently ignored (each would connect as someone else or somewhere else):
``username``/``password`` (basic auth, removed from kube-apiserver in 1.19), ``auth-provider`` (removed from
client-go in 1.26), impersonation (``as``, ``as-groups``, ...) and ``proxy-url``. Every bad input raises
:class:`KubeConfigError` naming the file, the entry and the field.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import datetime
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT = 60.0  # client-go waits forever; a service must not (the plugin is never interactive here)
_REFUSED_USER_FIELDS = {
    "username": "basic auth (username/password) is not supported: kube-apiserver removed it in 1.19",
    "password": "basic auth (username/password) is not supported: kube-apiserver removed it in 1.19",
    "auth-provider": "auth-provider plugins were removed from client-go in 1.26; use an exec credential "
    "plugin (e.g. kubelogin, gke-gcloud-auth-plugin, aws eks get-token)",
    "as": "impersonation is not supported",
    "as-uid": "impersonation is not supported",
    "as-groups": "impersonation is not supported",
    "as-user-extra": "impersonation is not supported",
}


class KubeConfigError(RuntimeError):
    """No usable cluster connection settings."""


@dataclass(frozen=True)
class ExecConfig:
    """A user's ``exec`` credential plugin (paths already resolved)."""

    user: str
    file: str
    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    provide_cluster_info: bool = False
    install_hint: str = ""


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin answered: a token or a PEM client certificate and key, maybe with an expiry."""

    token: str | None = None
    client_certificate_data: str | None = None
    client_key_data: str | None = None
    expires_at: float | None = None  # seconds since the epoch


@dataclass(frozen=True)
class Resolved:
    """The connection settings of one context of the merged kubeconfig files."""

    files: tuple[str, ...]
    context: str
    cluster: str
    user: str
    server: str
    namespace: str = "default"
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    insecure: bool = False
    tls_server_name: str | None = None
    token: str | None = None
    token_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    exec: ExecConfig | None = None
    exec_cluster: dict[str, Any] = field(default_factory=dict)  # spec.cluster for provideClusterInfo


@dataclass
class _Entry:
    name: str
    file: str
    body: dict[str, Any]


@dataclass
class Merged:
    """The merge of the kubeconfig files, each entry remembering the file that defined it."""

    files: tuple[str, ...] = ()
    clusters: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)
    current_context: str = ""
    current_context_file: str = ""

    def empty(self) -> bool:
        return not (self.clusters or self.users or self.contexts or self.current_context)


def kubeconfig_paths(explicit: str | None, env: Mapping[str, str]) -> tuple[list[str], bool]:
    """The files to read and whether they must exist (only ``--kubeconfig`` must)."""
    if explicit:
        return [explicit], True
    listed = env.get("KUBECONFIG", "")
    if listed:
        paths: list[str] = []
        for p in listed.split(os.pathsep):
            if p and p not in paths:
                paths.append(p)
        return paths, False
    home = env.get("HOME") or str(Path.home())
    return [os.path.join(home, ".kube", "config")], False


def merge(paths: Sequence[str], *, must_exist: bool) -> Merged:
    merged = Merged()
    read: list[str] = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except FileNotFoundError as e:
            if must_exist:
                raise KubeConfigError(f"cannot load kubeconfig {path}: no such file") from e
            continue
        except OSError as e:
            raise KubeConfigError(f"cannot load kubeconfig {path}: {e}") from e
        read.append(path)
        _merge_file(merged, path, text)
    merged.files = tuple(read)
    return merged


def _merge_file(merged: Merged, path: str, text: str) -> None:
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise KubeConfigError(f"kubeconfig {path}: not valid YAML: {e}") from e
    if doc is None:
        return  # an empty file is an empty config
    if not isinstance(doc, dict):
        raise KubeConfigError(f"kubeconfig {path}: must be a mapping, not {type(doc).__name__}")
    for key, kind, into in (
        ("clusters", "cluster", merged.clusters),
        ("users", "user", merged.users),
        ("contexts", "context", merged.contexts),
    ):
        items = doc.get(key) or []
        if not isinstance(items, list):
            raise KubeConfigError(f"kubeconfig {path}: {key}: must be a list, not {type(items).__name__}")
        seen: set[str] = set()
        for i, item in enumerate(items):
            where = f"kubeconfig {path}: {key}[{i}]"
            if not isinstance(item, dict):
                raise KubeConfigError(f"{where}: must be a mapping, not {type(item).__name__}")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise KubeConfigError(f"{where}: field 'name' must be a non-empty string")
            if name in seen:
                raise KubeConfigError(f"{where}: duplicate {kind} name {name!r}")
            seen.add(name)
            body = item.get(kind) or {}
            if not isinstance(body, dict):
                raise KubeConfigError(
                    f"kubeconfig {path}: {kind} {name!r}: field {kind!r} must be a mapping, "
                    f"not {type(body).__name__}"
                )
            into.setdefault(name, _Entry(name, path, body))  # the first file to set a name wins
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise KubeConfigError(f"kubeconfig {path}: field 'current-context' must be a string")
    if current and not merged.current_context:
        merged.current_context, merged.current_context_file = current, path


def _where(entry: _Entry, kind: str) -> str:
    return f"kubeconfig {entry.file}: {kind} {entry.name!r}"


def _str(entry: _Entry, kind: str, key: str) -> str | None:
    v = entry.body.get(key)
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise KubeConfigError(f"{_where(entry, kind)}: field {key!r} must be a string, not {type(v).__name__}")
    return v


def _bool(entry: _Entry, kind: str, key: str) -> bool:
    v = entry.body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise KubeConfigError(f"{_where(entry, kind)}: field {key!r} must be true or false, not {v!r}")
    return v


def _path(entry: _Entry, value: str) -> str:
    """A path as client-go resolves it: relative to the folder of the file that wrote it."""
    return value if os.path.isabs(value) else os.path.join(os.path.dirname(os.path.abspath(entry.file)), value)


def _b64(entry: _Entry, kind: str, key: str) -> bytes | None:
    v = _str(entry, kind, key)
    if v is None:
        return None
    try:
        return base64.b64decode("".join(v.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise KubeConfigError(f"{_where(entry, kind)}: field {key!r} is not valid base64: {e}") from e


def _one_of(entry: _Entry, kind: str, file_key: str, data_key: str) -> None:
    if entry.body.get(file_key) and entry.body.get(data_key):
        # client-go's validation refuses this too (the data would silently override the file)
        raise KubeConfigError(f"{_where(entry, kind)}: both {file_key!r} and {data_key!r} are set; use one")


def resolve(merged: Merged, context: str | None) -> Resolved:
    """The settings of ``context`` (default: ``current-context``) in the merged files."""
    files = ", ".join(merged.files) or "(no kubeconfig file)"
    name = context or merged.current_context
    if not name:
        raise KubeConfigError(f"kubeconfig {files}: no current-context is set and no --context given")
    ctx = merged.contexts.get(name)
    if ctx is None:
        known = ", ".join(sorted(merged.contexts)) or "none"
        origin = "--context" if context else f"current-context of {merged.current_context_file}"
        raise KubeConfigError(f"kubeconfig {files}: context {name!r} ({origin}) is not defined (known: {known})")
    cluster_name = _str(ctx, "context", "cluster")
    if not cluster_name:
        raise KubeConfigError(f"{_where(ctx, 'context')}: field 'cluster' is not set")
    cluster = merged.clusters.get(cluster_name)
    if cluster is None:
        raise KubeConfigError(
            f"{_where(ctx, 'context')}: field 'cluster' names {cluster_name!r}, which no kubeconfig file defines"
        )
    user_name = _str(ctx, "context", "user") or ""
    user = merged.users.get(user_name) if user_name else _Entry("", ctx.file, {})
    if user is None:
        raise KubeConfigError(
            f"{_where(ctx, 'context')}: field 'user' names {user_name!r}, which no kubeconfig file defines"
        )
    settings: dict[str, Any] = {
        "files": merged.files,
        "context": name,
        "cluster": cluster_name,
        "user": user_name,
        "namespace": _str(ctx, "context", "namespace") or "default",
    }
    settings.update(_cluster(cluster))
    settings.update(_user(user))
    return Resolved(**settings)


def _cluster(c: _Entry) -> dict[str, Any]:
    server = _str(c, "cluster", "server")
    if not server:
        raise KubeConfigError(f"{_where(c, 'cluster')}: field 'server' is not set")
    if "://" not in server:
        server = "https://" + server  # client-go's default for a bare host:port with TLS settings
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"{_where(c, 'cluster')}: field 'server' must be an http(s) URL, not {server!r}")
    if c.body.get("proxy-url"):
        raise KubeConfigError(f"{_where(c, 'cluster')}: field 'proxy-url' is not supported")
    _one_of(c, "cluster", "certificate-authority", "certificate-authority-data")
    insecure = _bool(c, "cluster", "insecure-skip-tls-verify")
    ca_path = _str(c, "cluster", "certificate-authority")
    ca_raw = _b64(c, "cluster", "certificate-authority-data")
    if insecure and (ca_path or ca_raw):
        # as client-go: a CA and "don't verify" contradict each other
        raise KubeConfigError(
            f"{_where(c, 'cluster')}: field 'insecure-skip-tls-verify' cannot be combined with a certificate authority"
        )
    out: dict[str, Any] = {
        "server": server.rstrip("/"),
        "insecure": insecure,
        "tls_server_name": _str(c, "cluster", "tls-server-name"),
    }
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # load now, so a bad CA is an error naming the field
    if ca_path:
        out["ca_file"] = _path(c, ca_path)
        try:
            probe.load_verify_locations(cafile=out["ca_file"])
        except (OSError, ssl.SSLError) as e:
            raise KubeConfigError(
                f"{_where(c, 'cluster')}: field 'certificate-authority': cannot load {out['ca_file']}: {e}"
            ) from e
    if ca_raw is not None:
        out["ca_data"] = ca_raw.decode(errors="replace")
        try:
            probe.load_verify_locations(cadata=out["ca_data"])
        except (ssl.SSLError, ValueError) as e:
            raise KubeConfigError(
                f"{_where(c, 'cluster')}: field 'certificate-authority-data' is not PEM certificates: {e}"
            ) from e
    spec: dict[str, Any] = {"server": out["server"]}
    if out["tls_server_name"]:
        spec["tls-server-name"] = out["tls_server_name"]
    if insecure:
        spec["insecure-skip-tls-verify"] = True
    ca_bytes = ca_raw if ca_raw is not None else (Path(out["ca_file"]).read_bytes() if ca_path else None)
    if ca_bytes:
        spec["certificate-authority-data"] = base64.b64encode(ca_bytes).decode()
    for ext in c.body.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == "client.authentication.k8s.io/exec":
            spec["config"] = ext.get("extension")
    out["exec_cluster"] = spec
    return out


def _user(u: _Entry) -> dict[str, Any]:
    for refused, why in _REFUSED_USER_FIELDS.items():
        if u.body.get(refused):
            raise KubeConfigError(f"{_where(u, 'user')}: field {refused!r}: {why}")
    _one_of(u, "user", "client-certificate", "client-certificate-data")
    _one_of(u, "user", "client-key", "client-key-data")
    out: dict[str, Any] = {"token": _str(u, "user", "token")}
    token_file = _str(u, "user", "tokenFile")
    if token_file:
        out["token_file"] = _path(u, token_file)
        try:
            Path(out["token_file"]).read_text()
        except OSError as e:
            raise KubeConfigError(f"{_where(u, 'user')}: field 'tokenFile': cannot read {out['token_file']}: {e}") from e
    cert = _str(u, "user", "client-certificate")
    key = _str(u, "user", "client-key")
    cert_data = _b64(u, "user", "client-certificate-data")
    key_data = _b64(u, "user", "client-key-data")
    if cert or cert_data or key or key_data:
        if not (cert or cert_data):
            raise KubeConfigError(f"{_where(u, 'user')}: a client key without 'client-certificate' or 'client-certificate-data'")
        if not (key or key_data):
            raise KubeConfigError(f"{_where(u, 'user')}: a client certificate without 'client-key' or 'client-key-data'")
        cert_file = _path(u, cert) if cert else private_file(cert_data or b"", ".crt")
        key_file = _path(u, key) if key else private_file(key_data or b"", ".key")
        fields = (
            f"{'client-certificate' if cert else 'client-certificate-data'} and "
            f"{'client-key' if key else 'client-key-data'}"
        )
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise KubeConfigError(f"{_where(u, 'user')}: fields {fields}: not a usable certificate and key: {e}") from e
        out["client_cert_file"], out["client_key_file"] = cert_file, key_file
    if u.body.get("exec"):
        out["exec"] = _exec(u)
    return out


def _exec(u: _Entry) -> ExecConfig:
    e = u.body["exec"]
    where = f"{_where(u, 'user')}: exec"
    if not isinstance(e, dict):
        raise KubeConfigError(f"{where}: must be a mapping")
    version = e.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise KubeConfigError(f"{where}: field 'apiVersion' is {version!r}; supported: {', '.join(EXEC_API_VERSIONS)}")
    command = e.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError(f"{where}: field 'command' must be a non-empty string")
    if os.sep in command:
        command = _path(u, command)  # as client-go: only a command with a path separator is a path
    args = e.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeConfigError(f"{where}: field 'args' must be a list of strings")
    env: list[tuple[str, str]] = []
    for i, item in enumerate(e.get("env") or []):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise KubeConfigError(f"{where}: env[{i}]: field 'name' must be a non-empty string")
        value = item.get("value", "")
        if not isinstance(value, str):
            raise KubeConfigError(f"{where}: env[{i}] ({item['name']}): field 'value' must be a string")
        env.append((item["name"], value))
    mode = e.get("interactiveMode") or ("IfAvailable" if version.endswith("v1beta1") else None)
    if mode is None:
        raise KubeConfigError(f"{where}: field 'interactiveMode' must be set for {version} (Never, IfAvailable)")
    if mode == "Always":
        raise KubeConfigError(f"{where}: field 'interactiveMode' is Always, but the grouper never runs the plugin "
                              "with a terminal; use Never or IfAvailable")
    if mode not in ("Never", "IfAvailable"):
        raise KubeConfigError(f"{where}: field 'interactiveMode' must be Never or IfAvailable, not {mode!r}")
    return ExecConfig(
        user=u.name,
        file=u.file,
        api_version=version,
        command=command,
        args=tuple(args),
        env=tuple(env),
        provide_cluster_info=bool(e.get("provideClusterInfo")),
        install_hint=str(e.get("installHint") or ""),
    )


def run_exec(plugin: ExecConfig, cluster: Mapping[str, Any], *, timeout: float = EXEC_TIMEOUT) -> ExecCredential:
    """Run an exec credential plugin as client-go does (non-interactively) and read its ExecCredential."""
    where = f"kubeconfig {plugin.file}: user {plugin.user!r}: exec {plugin.command!r}"
    spec: dict[str, Any] = {"interactive": False}
    if plugin.provide_cluster_info:
        spec["cluster"] = dict(cluster)
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        done = subprocess.run(
            [plugin.command, *plugin.args], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
        )
    except FileNotFoundError as e:
        hint = f"\n{plugin.install_hint}" if plugin.install_hint else ""
        raise KubeConfigError(f"{where}: the credential plugin is not installed ({e}){hint}") from e
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KubeConfigError(f"{where}: cannot run the credential plugin: {e}") from e
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()[-2000:]
        raise KubeConfigError(f"{where}: the credential plugin exited with {done.returncode}: {err}")
    return parse_exec_credential(done.stdout, plugin.api_version, where)


def parse_exec_credential(raw: bytes, api_version: str, where: str) -> ExecCredential:
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise KubeConfigError(f"{where}: the plugin's output is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise KubeConfigError(f"{where}: the plugin's output is not an ExecCredential object")
    if doc.get("apiVersion") != api_version or doc.get("kind") != "ExecCredential":
        raise KubeConfigError(
            f"{where}: the plugin answered apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}; "
            f"expected {api_version} ExecCredential"
        )
    status = doc.get("status")
    if not isinstance(status, dict):
        raise KubeConfigError(f"{where}: the plugin's ExecCredential has no field 'status'")
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    for name, v in (("token", token), ("clientCertificateData", cert), ("clientKeyData", key)):
        if v is not None and not isinstance(v, str):
            raise KubeConfigError(f"{where}: field 'status.{name}' must be a string")
    if bool(cert) != bool(key):
        raise KubeConfigError(f"{where}: the plugin returned only one of 'status.clientCertificateData' and "
                              "'status.clientKeyData'; both are needed")
    if not token and not cert:
        raise KubeConfigError(f"{where}: the plugin returned neither 'status.token' nor a client certificate")
    expires_at = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        try:
            moment = datetime.datetime.fromisoformat(str(stamp))
        except ValueError as e:
            raise KubeConfigError(f"{where}: field 'status.expirationTimestamp' is not RFC 3339: {stamp!r}") from e
        if moment.tzinfo is None:
            raise KubeConfigError(f"{where}: field 'status.expirationTimestamp' has no time zone: {stamp!r}")
        expires_at = moment.timestamp()
    return ExecCredential(token=token, client_certificate_data=cert, client_key_data=key, expires_at=expires_at)


_private_dir: str | None = None


def private_file(data: bytes, suffix: str) -> str:
    """``data`` in a file only this user can read (``ssl`` loads client certificates and keys only from
    files), in a private folder removed at exit; the same data gives the same file (no pile-up on refresh)."""
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="grouper-kubeconfig-")  # mode 0700
        atexit.register(shutil.rmtree, _private_dir, True)
    path = os.path.join(_private_dir, hashlib.sha256(data).hexdigest()[:24] + suffix)
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path
