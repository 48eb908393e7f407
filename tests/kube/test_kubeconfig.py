"""Reading kubeconfig files and in-cluster settings without the ``kubernetes`` package
(grouper/kube/kubeconfig.py, grouper/kube/config.py): client-go's rules for the cases people use, and an
error naming the file, the entry and the field for every bad input.

Pure file reading; certificates come from a throwaway CA (devtools/cluster/pki.py, the ``openssl`` tool),
exec plugins are small Python scripts written by the test. The live tests at the end connect to the local
control plane through kubeconfigs read this way (token, exec plugin, client certificate, tls-server-name).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster import LocalCluster
from devtools.cluster import pki as pki_tools
from grouper.kube import config as kube_config
from grouper.kube import kubeconfig as reader
from grouper.kube.config import ClusterConfig, KubeConfigError
from grouper.kube.sync import SyncKube
from grouper.kube.transport import ApiError


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_tools.Pki:
    return pki_tools.generate(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def client_pair(pki: pki_tools.Pki, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate and key (what load_cert_chain needs; the API server is not involved)."""
    return pki_tools.issue_serving_cert(pki, tmp_path_factory.mktemp("client"), "client")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def kubeconfig(
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    *,
    namespace: str | None = None,
    name: str = "c",
    current: str | None = "c",
) -> dict[str, Any]:
    ctx: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        ctx["namespace"] = namespace
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
                      if cluster is None else cluster}],
        "users": [{"name": name, "user": {"token": f"token-{name}"} if user is None else user}],
        "contexts": [{"name": name, "context": ctx}],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def load_file(path: Path, context: str | None = None) -> ClusterConfig:
    return kube_config._from_kubeconfig(str(path), context, env={})


def load_env(env: dict[str, str], context: str | None = None) -> ClusterConfig:
    return kube_config._from_kubeconfig(None, context, env=env)


# ---------------------------------------------------------------- which files, merging, contexts


def test_token_server_namespace_of_the_current_context(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", kubeconfig({"server": "https://10.1.2.3:6443/", "insecure-skip-tls-verify": True},
                                            {"token": "abc"}, namespace="team-a"))
    cfg = load_file(path)
    assert (cfg.server, cfg.token, cfg.namespace, cfg.verify_tls) == ("https://10.1.2.3:6443", "abc", "team-a", False)
    assert cfg.bearer() == "abc"
    assert cfg.source == f"kubeconfig:{path}"


def test_namespace_defaults_to_default_and_context_flag_picks_another(tmp_path: Path) -> None:
    doc = kubeconfig()
    other = kubeconfig(name="other", namespace="ns-other")
    for key in ("clusters", "users", "contexts"):
        doc[key] += other[key]
    path = write(tmp_path / "kc", doc)
    assert load_file(path).namespace == "default"
    cfg = load_file(path, context="other")
    assert (cfg.token, cfg.namespace, cfg.context) == ("token-other", "ns-other", "other")
    with pytest.raises(KubeConfigError, match=r"context 'nope' \(--context\) is not defined \(known: c, other\)"):
        load_file(path, context="nope")


def test_kubeconfig_env_merges_first_file_wins_and_first_current_context(tmp_path: Path) -> None:
    # a: defines cluster "c" (server A) and user "c", no current-context
    a = kubeconfig({"server": "https://a.example:6443", "insecure-skip-tls-verify": True}, {"token": "from-a"},
                   current=None)
    # b: redefines "c" (ignored: a came first), adds user "b" and context "b", sets current-context "b"
    b = kubeconfig({"server": "https://b.example:6443", "insecure-skip-tls-verify": True}, {"token": "from-b"},
                   current="b")
    b["users"].append({"name": "b", "user": {"token": "user-b"}})
    b["contexts"].append({"name": "b", "context": {"cluster": "c", "user": "b", "namespace": "nb"}})
    # c: sets another current-context (ignored: b came first)
    c = kubeconfig(name="zz", current="zz")
    pa, pb, pc = write(tmp_path / "a", a), write(tmp_path / "b", b), write(tmp_path / "c", c)
    missing = tmp_path / "missing"  # missing files in $KUBECONFIG are skipped, as client-go does
    env = {"KUBECONFIG": os.pathsep.join([str(pa), "", str(missing), str(pb), str(pa), str(pc)])}
    cfg = load_env(env)
    assert (cfg.server, cfg.token, cfg.namespace) == ("https://a.example:6443", "user-b", "nb")
    assert cfg.source == "kubeconfig:" + os.pathsep.join([str(pa), str(pb), str(pc)])
    assert load_env(env, context="c").token == "from-a"
    assert load_env(env, context="zz").token == "token-zz"


def test_default_file_is_home_kube_config(tmp_path: Path) -> None:
    write(tmp_path / ".kube" / "config", kubeconfig(user={"token": "home"}))
    assert load_env({"HOME": str(tmp_path)}).token == "home"
    paths, must_exist = reader.kubeconfig_paths(None, {"HOME": str(tmp_path)})
    assert (paths, must_exist) == ([str(tmp_path / ".kube" / "config")], False)


def test_explicit_kubeconfig_must_exist(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=rf"cannot load kubeconfig {tmp_path / 'nope'}: no such file"):
        load_file(tmp_path / "nope")


def test_load_falls_back_to_in_cluster_only_when_no_kubeconfig_holds_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "empty"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match=r"no kubeconfig .* and not running in a cluster"):
        kube_config.load()
    write(tmp_path / "kc", kubeconfig(user={"token": "t"}))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'empty'}{os.pathsep}{tmp_path / 'kc'}")
    assert kube_config.load().token == "t"


# ---------------------------------------------------------------- clusters


def test_certificate_authority_path_is_relative_to_the_kubeconfig_folder(
    tmp_path: Path, pki: pki_tools.Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    (folder / "certs").mkdir(parents=True)
    (folder / "certs" / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    write(folder / "kc", kubeconfig({"server": "https://127.0.0.1:6443", "certificate-authority": "certs/ca.crt"}))
    monkeypatch.chdir(tmp_path)  # not the kubeconfig's folder
    cfg = load_file(Path("conf/kc"))
    assert cfg.ca_file == str(folder / "certs" / "ca.crt") and cfg.verify_tls
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and len(ctx.get_ca_certs()) == 1
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_certificate_authority_data_is_loaded_from_memory(tmp_path: Path, pki: pki_tools.Pki) -> None:
    pem = pki.ca_cert.read_bytes()
    cfg = load_file(write(tmp_path / "kc", kubeconfig({"server": "https://h:1", "certificate-authority-data": b64(pem)})))
    assert cfg.ca_file is None and cfg.ca_data == pem.decode()
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.get_ca_certs()[0]["subject"] == ((("commonName", "devcluster-ca"),),)


def test_plain_http_server_has_no_tls(tmp_path: Path) -> None:
    cfg = load_file(write(tmp_path / "kc", kubeconfig({"server": "http://127.0.0.1:8080"})))
    assert cfg.ssl_context() is False


def test_tls_server_name_is_what_the_certificate_is_checked_against(tmp_path: Path, pki: pki_tools.Pki) -> None:
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(pki.ca_cert.read_bytes()),
               "tls-server-name": "kubernetes.default"}
    cfg = load_file(write(tmp_path / "kc", kubeconfig(cluster)))
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname and len(ctx.get_ca_certs()) == 1
    tls = ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="127.0.0.1")
    assert tls.server_hostname == "kubernetes.default"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, r"cluster 'c': field 'server' is not set"),
        ({"server": "ftp://x"}, r"cluster 'c': field 'server' must be an http\(s\) URL"),
        ({"server": "https://x", "certificate-authority": "a", "certificate-authority-data": "YQ=="},
         r"cluster 'c': both 'certificate-authority' and 'certificate-authority-data' are set"),
        ({"server": "https://x", "certificate-authority-data": "not base64!"},
         r"cluster 'c': field 'certificate-authority-data' is not valid base64"),
        ({"server": "https://x", "certificate-authority-data": b64(b"hello")},
         r"cluster 'c': field 'certificate-authority-data' is not PEM certificates"),
        ({"server": "https://x", "certificate-authority": "missing.crt"},
         r"cluster 'c': field 'certificate-authority': cannot load .*missing.crt"),
        ({"server": "https://x", "insecure-skip-tls-verify": "yes"},
         r"cluster 'c': field 'insecure-skip-tls-verify' must be true or false"),
        ({"server": "https://x", "proxy-url": "http://proxy:3128"}, r"cluster 'c': field 'proxy-url' is not supported"),
        ({"server": 6443}, r"cluster 'c': field 'server' must be a string, not int"),
    ],
)
def test_bad_cluster_fields_name_file_cluster_and_field(tmp_path: Path, fields: dict[str, Any], message: str) -> None:
    path = write(tmp_path / "kc", kubeconfig(fields))
    with pytest.raises(KubeConfigError, match=rf"^kubeconfig {path}: {message}"):
        load_file(path)


def test_insecure_with_a_certificate_authority_is_refused(tmp_path: Path, pki: pki_tools.Pki) -> None:
    cluster = {"server": "https://x", "insecure-skip-tls-verify": True,
               "certificate-authority-data": b64(pki.ca_cert.read_bytes())}
    with pytest.raises(KubeConfigError, match="'insecure-skip-tls-verify' cannot be combined with a certificate authority"):
        load_file(write(tmp_path / "kc", kubeconfig(cluster)))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [", r"not valid YAML"),
        ("- a\n- b\n", r"must be a mapping, not list"),
        ("clusters: {a: 1}\n", r"clusters: must be a list, not dict"),
        ("clusters:\n- cluster: {server: https://x}\n", r"clusters\[0\]: field 'name' must be a non-empty string"),
        ("clusters:\n- {name: a, cluster: {server: https://x}}\n- {name: a, cluster: {server: https://y}}\n",
         r"clusters\[1\]: duplicate cluster name 'a'"),
        ("users:\n- {name: u, user: token}\n", r"user 'u': field 'user' must be a mapping, not str"),
        ("current-context: [a]\n", r"field 'current-context' must be a string"),
        ("clusters: []\n", r"no current-context is set and no --context given"),
    ],
)
def test_malformed_files_name_the_file_and_the_place(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeConfigError, match=rf"kubeconfig {path}: .*{message}"):
        load_file(path)


def test_context_naming_undefined_cluster_or_user(tmp_path: Path) -> None:
    doc = kubeconfig()
    doc["contexts"][0]["context"]["cluster"] = "ghost"
    path = write(tmp_path / "kc", doc)
    with pytest.raises(KubeConfigError, match=r"context 'c': field 'cluster' names 'ghost', which no kubeconfig"):
        load_file(path)
    doc = kubeconfig()
    doc["contexts"][0]["context"]["user"] = "ghost"
    with pytest.raises(KubeConfigError, match=r"context 'c': field 'user' names 'ghost', which no kubeconfig"):
        load_file(write(path, doc))


# ---------------------------------------------------------------- users


def test_token_file_relative_and_preferred_to_token(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user={"token": "inline", "tokenFile": "tok"})))
    assert cfg.token_file == str(tmp_path / "tok")
    assert cfg.bearer() == "from-file"  # as client-go: the file's content takes precedence
    (tmp_path / "tok").write_text("rotated\n")
    assert cfg.refresh_token() and cfg.bearer() == "rotated"


def test_client_certificate_and_key_paths(tmp_path: Path, client_pair: tuple[Path, Path]) -> None:
    cert, key = client_pair
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "c.crt").write_bytes(cert.read_bytes())
    (tmp_path / "pki" / "c.key").write_bytes(key.read_bytes())
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user={"client-certificate": "pki/c.crt",
                                                            "client-key": "pki/c.key"})))
    assert (cfg.client_cert_file, cfg.client_key_file) == (str(tmp_path / "pki/c.crt"), str(tmp_path / "pki/c.key"))
    assert cfg.token is None and isinstance(cfg.ssl_context(), ssl.SSLContext)


def test_client_certificate_data_goes_to_private_files(tmp_path: Path, client_pair: tuple[Path, Path]) -> None:
    cert, key = client_pair
    user = {"client-certificate-data": b64(cert.read_bytes()), "client-key-data": b64(key.read_bytes())}
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user=user)))
    assert cfg.client_cert_file and cfg.client_key_file
    assert Path(cfg.client_cert_file).read_bytes() == cert.read_bytes()
    assert Path(cfg.client_key_file).read_bytes() == key.read_bytes()
    for f in (cfg.client_cert_file, cfg.client_key_file):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(cfg.client_key_file).parent).st_mode) == 0o700
    again = load_file(tmp_path / "kc")  # a refresh writes no new files
    assert (again.client_cert_file, again.client_key_file) == (cfg.client_cert_file, cfg.client_key_file)
    assert isinstance(cfg.ssl_context(), ssl.SSLContext)


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"username": "admin", "password": "secret"}, r"field 'username': basic auth \(username/password\) is not supported"),
        ({"auth-provider": {"name": "oidc", "config": {}}}, r"field 'auth-provider': auth-provider plugins were removed"),
        ({"token": "t", "as": "someone-else"}, r"field 'as': impersonation is not supported"),
        ({"client-certificate": "a.crt"}, r"a client certificate without 'client-key' or 'client-key-data'"),
        ({"client-key-data": "YQ=="}, r"a client key without 'client-certificate' or 'client-certificate-data'"),
        ({"client-certificate": "a", "client-certificate-data": "YQ==", "client-key": "k"},
         r"both 'client-certificate' and 'client-certificate-data' are set"),
        ({"client-certificate-data": "YQ==", "client-key-data": "YQ=="},
         r"fields client-certificate-data and client-key-data: not a usable certificate and key"),
        ({"client-certificate": "missing.crt", "client-key": "missing.key"},
         r"fields client-certificate and client-key: not a usable certificate and key"),
        ({"tokenFile": "missing-token"}, r"field 'tokenFile': cannot read .*missing-token"),
        ({"token": 42}, r"field 'token' must be a string, not int"),
    ],
)
def test_bad_user_fields_name_file_user_and_field(tmp_path: Path, user: dict[str, Any], message: str) -> None:
    path = write(tmp_path / "kc", kubeconfig(user=user))
    with pytest.raises(KubeConfigError, match=rf"^kubeconfig {path}: user 'c': {message}"):
        load_file(path)


# ---------------------------------------------------------------- exec plugins

PLUGIN = """\
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
state = pathlib.Path(os.environ["STATE"])
runs = int(state.read_text()) + 1 if state.exists() else 1
state.write_text(str(runs))
(state.parent / "last-info.json").write_text(json.dumps({"info": info, "argv": sys.argv[1:]}))
status = json.loads(os.environ.get("STATUS", "{}"))
if "token" in status:
    status["token"] = f"{status['token']}-{runs}"
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def plugin(tmp_path: Path, *, status: dict[str, Any], api_version: str = "client.authentication.k8s.io/v1",
           **extra: Any) -> dict[str, Any]:
    script = tmp_path / "bin" / "plugin.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(PLUGIN)
    exec_: dict[str, Any] = {
        "apiVersion": api_version,
        "command": sys.executable,
        "args": [str(script), "--flag"],
        "env": [{"name": "STATE", "value": str(tmp_path / "runs")}, {"name": "STATUS", "value": json.dumps(status)}],
        **extra,
    }
    if api_version.endswith("/v1"):
        exec_.setdefault("interactiveMode", "Never")
    return exec_


def last_info(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "last-info.json").read_text()))


def test_exec_plugin_token_and_exec_info(tmp_path: Path) -> None:
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user={"exec": plugin(tmp_path, status={"token": "tok"})})))
    assert cfg.bearer() == "tok-1" and cfg.token_expires_at is None
    seen = last_info(tmp_path)
    assert seen["argv"] == ["--flag"]
    assert seen["info"] == {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                            "spec": {"interactive": False}}
    assert cfg.bearer() == "tok-1"  # no expiry: not run again ...
    assert cfg.refresh_token() and cfg.bearer() == "tok-2"  # ... until a 401


def test_exec_plugin_rerun_when_its_credential_expires(tmp_path: Path) -> None:
    status = {"token": "tok", "expirationTimestamp": "2030-01-01T00:00:00Z"}
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user={"exec": plugin(tmp_path, status=status)})))
    expiry = 1893456000.0  # 2030-01-01T00:00:00Z
    assert cfg.token_expires_at == expiry
    cfg.clock = lambda: expiry - 1
    assert cfg.bearer() == "tok-1"
    cfg.clock = lambda: expiry
    assert cfg.bearer() == "tok-2"
    assert cfg.bearer() == "tok-3"  # still expired by this clock: run again, as client-go does


def test_exec_plugin_v1beta1_client_certificate(tmp_path: Path, client_pair: tuple[Path, Path]) -> None:
    cert, key = client_pair
    status = {"clientCertificateData": cert.read_text(), "clientKeyData": key.read_text()}
    user = {"exec": plugin(tmp_path, status=status, api_version="client.authentication.k8s.io/v1beta1")}
    cfg = load_file(write(tmp_path / "kc", kubeconfig(user=user)))
    assert cfg.token is None and cfg.client_cert_file and cfg.client_key_file
    assert Path(cfg.client_cert_file).read_bytes() == cert.read_bytes()
    assert stat.S_IMODE(os.stat(cfg.client_key_file).st_mode) == 0o600
    assert isinstance(cfg.ssl_context(), ssl.SSLContext)
    assert last_info(tmp_path)["info"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"


def test_exec_plugin_cluster_info_and_relative_command(tmp_path: Path, pki: pki_tools.Pki) -> None:
    ca = pki.ca_cert.read_bytes()
    wrapper = tmp_path / "bin" / "wrapper.sh"
    exec_ = plugin(tmp_path, status={"token": "tok"}, provideClusterInfo=True)
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {exec_['args'][0]} \"$@\"\n")
    wrapper.chmod(0o755)
    exec_.update(command="./bin/wrapper.sh", args=["a b"])  # a path with a separator: relative to the kubeconfig
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(ca),
               "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "x"}}]}
    assert load_file(write(tmp_path / "kc", kubeconfig(cluster, {"exec": exec_}))).bearer() == "tok-1"
    seen = last_info(tmp_path)
    assert seen["argv"] == ["a b"]
    assert seen["info"]["spec"]["cluster"] == {"server": "https://127.0.0.1:6443",
                                               "certificate-authority-data": b64(ca), "config": {"audience": "x"}}


FAILING = "import sys; print('login expired, run `login`', file=sys.stderr); sys.exit(3)"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, r"exec: field 'apiVersion' is 'client.authentication.k8s.io/v1alpha1'"),
        ({"interactiveMode": None}, r"exec: field 'interactiveMode' must be set for client.authentication.k8s.io/v1"),
        ({"interactiveMode": "Always"}, r"exec: field 'interactiveMode' is Always, but"),
        ({"command": ""}, r"exec: field 'command' must be a non-empty string"),
        ({"env": [{"value": "x"}]}, r"exec: env\[0\]: field 'name' must be a non-empty string"),
        ({"args": ["-c", FAILING]}, r"exec '.*': the credential plugin exited with 3: login expired, run `login`"),
        ({"command": "no-such-plugin-xyz", "installHint": "install it with: brew install xyz"},
         r"exec 'no-such-plugin-xyz': the credential plugin is not installed .*\ninstall it with: brew install xyz"),
        ({"args": ["-c", "print('hello')"]}, r"exec '.*': the plugin's output is not JSON"),
        ({"args": ["-c", "print('{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", \"kind\": \"ExecCredential\", \"status\": {\"token\": \"t\"}}')"]},
         r"exec '.*': the plugin answered apiVersion 'client.authentication.k8s.io/v1beta1' kind 'ExecCredential'; expected client.authentication.k8s.io/v1"),
    ],
)
def test_exec_errors_name_the_user_and_the_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    exec_ = plugin(tmp_path, status={"token": "tok"})
    exec_.update(change)
    exec_ = {k: v for k, v in exec_.items() if v is not None}
    path = write(tmp_path / "kc", kubeconfig(user={"exec": exec_}))
    with pytest.raises(KubeConfigError, match=rf"^kubeconfig {path}: user 'c': {message}"):
        load_file(path)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({}, r"returned neither 'status.token' nor a client certificate"),
        ({"clientCertificateData": "PEM"}, r"returned only one of 'status.clientCertificateData' and 'status.clientKeyData'"),
        ({"token": "t", "expirationTimestamp": "tomorrow"}, r"field 'status.expirationTimestamp' is not RFC 3339"),
        ({"token": "t", "expirationTimestamp": "2030-01-01T00:00:00"}, r"'status.expirationTimestamp' has no time zone"),
    ],
)
def test_bad_exec_credentials(tmp_path: Path, status: dict[str, Any], message: str) -> None:
    path = write(tmp_path / "kc", kubeconfig(user={"exec": plugin(tmp_path, status=status)}))
    with pytest.raises(KubeConfigError, match=rf"user 'c': exec .*: .*{message}"):
        load_file(path)


# ---------------------------------------------------------------- in-cluster


def service_account(tmp_path: Path, pki: pki_tools.Pki) -> Path:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token\n")
    (sa / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (sa / "namespace").write_text("kai-system")
    return sa


def test_in_cluster_ipv4_and_ipv6(tmp_path: Path, pki: pki_tools.Pki) -> None:
    sa = service_account(tmp_path, pki)
    cfg = kube_config.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, str(sa))
    assert (cfg.server, cfg.bearer(), cfg.namespace, cfg.ca_file) == (
        "https://10.0.0.1:443", "sa-token", "kai-system", str(sa / "ca.crt"))
    assert cfg.source == "in-cluster" and isinstance(cfg.ssl_context(), ssl.SSLContext)
    v6 = kube_config.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, str(sa))
    assert v6.server == "https://[fd00::1]:443"
    (sa / "token").write_text("rotated")
    assert v6.refresh_token() and v6.bearer() == "rotated"


def test_in_cluster_needs_host_port_and_token(tmp_path: Path, pki: pki_tools.Pki) -> None:
    sa = service_account(tmp_path, pki)
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set"):
        kube_config.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, str(sa))
    (sa / "token").unlink()
    with pytest.raises(KubeConfigError, match=r"cannot read token file .*sa/token"):
        kube_config.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, str(sa))


# ---------------------------------------------------------------- against the real API server


def namespaces(path: Path, context: str | None = None) -> list[str]:
    with SyncKube.connect(str(path), context) as kube:
        return [n["metadata"]["name"] for n in kube.list_items("/api/v1/namespaces")]


@pytest.fixture
def admin_kubeconfig(cluster: LocalCluster, tmp_path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(Path(cluster.kubeconfig_path).read_text()))


def test_live_exec_plugin_token(cluster: LocalCluster, tmp_path: Path, admin_kubeconfig: dict[str, Any]) -> None:
    doc = admin_kubeconfig
    token = doc["users"][0]["user"].pop("token")
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    doc["users"][0]["user"]["exec"] = {"apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never",
                                       "command": sys.executable, "args": ["-c", f"print({json.dumps(answer)!r})"]}
    assert "kube-system" in namespaces(write(tmp_path / "kc", doc))
    doc["users"][0]["user"]["exec"]["args"][1] = f"print({json.dumps(answer).replace(token, 'wrong')!r})"
    with pytest.raises(ApiError) as unauthorized:
        namespaces(write(tmp_path / "kc", doc))
    assert unauthorized.value.status == 401


def test_live_client_certificate_data(cluster: LocalCluster, tmp_path: Path, admin_kubeconfig: dict[str, Any]) -> None:
    """A client certificate signed by the cluster's CA (--client-ca-file), group system:masters."""
    ca_dir = Path(cluster.ca_file).parent
    key, csr, crt = tmp_path / "u.key", tmp_path / "u.csr", tmp_path / "u.crt"
    (tmp_path / "u.ext").write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                    "extendedKeyUsage=clientAuth\n")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    subprocess.run(["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/O=system:masters/CN=cert-user"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", cluster.ca_file, "-CAkey", str(ca_dir / "ca.key"),
                    "-CAcreateserial", "-CAserial", str(tmp_path / "ca.srl"), "-out", str(crt), "-days", "1",
                    "-extfile", str(tmp_path / "u.ext")], check=True, capture_output=True)
    doc = admin_kubeconfig
    doc["users"][0]["user"] = {"client-certificate-data": b64(crt.read_bytes()), "client-key-data": b64(key.read_bytes())}
    assert "kube-system" in namespaces(write(tmp_path / "kc", doc))


def test_live_tls_server_name(cluster: LocalCluster, tmp_path: Path, admin_kubeconfig: dict[str, Any]) -> None:
    doc = admin_kubeconfig
    doc["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes.default.svc"  # in the serving certificate
    assert "kube-system" in namespaces(write(tmp_path / "good", doc))
    doc["clusters"][0]["cluster"]["tls-server-name"] = "not-the-server.example"
    with pytest.raises(ApiError, match=r"(?i)certificate|hostname") as failed:
        namespaces(write(tmp_path / "bad", doc))
    assert failed.value.status == 0  # the TLS handshake failed: no answer
