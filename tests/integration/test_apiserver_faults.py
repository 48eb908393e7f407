"""Fault operations of the local control plane: extra API-server flags, stop, restart on the same etcd.

These run on a cluster of their own (not the session's ``cluster``), so stopping its API server disturbs
no other test.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from clusters import cluster_fixture

from devtools.cluster import LocalCluster

pytestmark = pytest.mark.cluster

MIN_REQUEST_TIMEOUT = 3  # s: the server ends watches without timeoutSeconds after 3-6 s (default 30-60 min)


faulty = cluster_fixture("faulty", shared=False, crds=(), apiserver_args=[f"--min-request-timeout={MIN_REQUEST_TIMEOUT}"],
                         quiet=True)


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def ok(c: LocalCluster, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    status, obj = c.request(method, path, body, **kw)
    assert status in (200, 201), (method, path, status, obj)
    return obj


def whoami(c: LocalCluster, token: str) -> str:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    obj = ok(c, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review, token=token)
    return str(obj["status"]["userInfo"]["username"])


def test_extra_flag_makes_the_server_end_watches_early(faulty: LocalCluster) -> None:
    req = urllib.request.Request(
        faulty.server + "/api/v1/namespaces/default/configmaps?watch=1",
        headers={"Authorization": f"Bearer {faulty.admin_token}"},
    )
    # a socket timeout (the watch still open after 60 s) fails the test; the server closing it ends the loop
    with urllib.request.urlopen(req, timeout=60, context=faulty.ssl_context()) as resp:
        assert resp.status == 200
        while resp.read1(65536):
            pass


def test_stopped_apiserver_refuses_connections_and_restart_keeps_the_data(faulty: LocalCluster) -> None:
    name = f"cm-{uuid.uuid4().hex[:8]}"
    created = ok(faulty, "POST", "/api/v1/namespaces/default/configmaps", configmap(name))
    faulty.create_service_account("default", "fault-sa")
    token = faulty.create_token("default", "fault-sa")
    port = faulty.ports["kube-apiserver"]

    faulty.stop_apiserver()
    assert not faulty.apiserver_running and not faulty.running
    with pytest.raises(urllib.error.URLError) as refused:
        faulty.request("GET", "/readyz", timeout=5)
    assert isinstance(refused.value.reason, ConnectionRefusedError)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()

    faulty.start_apiserver()
    assert faulty.apiserver_running and faulty.running
    assert faulty.server == f"https://127.0.0.1:{port}"
    got = ok(faulty, "GET", f"/api/v1/namespaces/default/configmaps/{name}")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # the token issued before the restart is still valid (same signing key), and writes work again
    assert whoami(faulty, token) == "system:serviceaccount:default:fault-sa"
    patched = ok(faulty, "PATCH", f"/api/v1/namespaces/default/configmaps/{name}", {"data": {"k": "w"}},
                 content_type="application/merge-patch+json")
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


def test_crash_restart_from_a_short_lived_thread_with_other_flags(faulty: LocalCluster) -> None:
    name = f"cm-{uuid.uuid4().hex[:8]}"
    ok(faulty, "POST", "/api/v1/namespaces/default/configmaps", configmap(name))
    # like `await asyncio.to_thread(cluster.restart_apiserver, ...)`: the restarting thread ends right after
    t = threading.Thread(target=faulty.restart_apiserver, kwargs={"graceful": False, "apiserver_args": []})
    t.start()
    t.join()
    time.sleep(1)  # an API server tied to that thread's life (PR_SET_PDEATHSIG) would be killed by now
    assert faulty.apiserver_running
    assert ok(faulty, "GET", f"/api/v1/namespaces/default/configmaps/{name}")["data"] == {"k": "v"}
    # back to the fixture's flags for any later test
    faulty.restart_apiserver(apiserver_args=[f"--min-request-timeout={MIN_REQUEST_TIMEOUT}"])
    assert faulty.apiserver_running


def test_start_and_stop_refuse_the_wrong_state(faulty: LocalCluster) -> None:
    from devtools.cluster import ClusterError

    with pytest.raises(ClusterError, match="already running"):
        faulty.start_apiserver()
    fresh = LocalCluster(quiet=True)
    with pytest.raises(ClusterError, match="not started"):
        fresh.start_apiserver()
    with pytest.raises(ClusterError, match="not running"):
        fresh.stop_apiserver()
