"""What ``grouper run`` has imported when it first answers ``/readyz`` 200 (issue 37): the probes and everything
the service needs to be ready, but not the HTTP API's stack (FastAPI, Starlette, pydantic), which loads only
after that answer (grouper/runtime/http_front.py), nor the ``kubernetes`` package. A later import on the
way to ready that pulls one of them in again fails here, instead of silently adding its CPU to every start.

The process is a real ``grouper run`` against the local cluster, as the ServiceAccount of deploy/rbac.yaml, with
the HTTP API's default authentication; a small launcher records ``sys.modules`` and the threads at the moment
its HTTP front starts sending the first ``/readyz`` 200 (the ASGI ``http.response.start`` message)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from devtools.grouper_process import GrouperProcess

REPO = Path(__file__).resolve().parents[2]
NOT_BEFORE_READY = {"fastapi", "starlette", "pydantic", "pydantic_core", "kubernetes"}

LAUNCHER = r'''
import json, os, sys, threading
from grouper.runtime import http_front

front_call = http_front.StartupFront.__call__
recorded = []


async def call(self, scope, receive, send):
    async def spy(message):
        if (not recorded and message["type"] == "http.response.start" and scope["path"] == "/readyz"
                and message["status"] == 200):
            recorded.append(True)
            with open(os.environ["READY_MODULES"], "w") as f:
                json.dump({"modules": sorted(sys.modules),
                           "threads": sorted(t.name for t in threading.enumerate())}, f)
        await send(message)

    await front_call(self, scope, receive, spy)


http_front.StartupFront.__call__ = call
from grouper.cli.main import main

sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture
def grouper(cluster: LocalCluster, kube: Kube, tmp_path: Path) -> Iterator[GrouperProcess]:
    kube.apply_yaml(REPO / "deploy" / "rbac.yaml")
    token = tmp_path / "token"
    token.write_text(cluster.create_token("kai-system", "kai-pod-grouper"))
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    with GrouperProcess(cluster, token, tmp_path, identity="ready-imports",
                        command=[sys.executable, str(launcher)],
                        env={"READY_MODULES": str(tmp_path / "ready.json")},
                        args=["--definitions", str(REPO / "definitions"), "--http-auth=kubernetes"]) as g:
        yield g


def test_nothing_of_the_http_api_is_imported_before_ready_and_it_loads_after(
    grouper: GrouperProcess, tmp_path: Path
) -> None:
    grouper.wait_ready(120)
    seen = json.loads((tmp_path / "ready.json").read_text())
    packages = {name.split(".", 1)[0] for name in seen["modules"]}
    assert "grouper.runtime.service" in seen["modules"]  # the record is of the running service
    assert not NOT_BEFORE_READY & packages, f"imported before the first /readyz 200: {NOT_BEFORE_READY & packages}"
    assert "load-http-api" not in seen["threads"]

    # once ready, the API loads, and it is the API as before: the probes open, everything else authenticated
    wait_until(lambda: "HTTP API loaded" in grouper.log_tail(200), 120, what="the HTTP API loaded")
    ready = grouper.get("/readyz")
    assert ready is not None and ready.status_code == 200 and ready.json()["status"] == "ok"
    metrics = grouper.get("/metrics")
    assert metrics is not None and metrics.status_code == 401
