"""Pure helpers of the transport (request labels, token bucket), the pod cache transform, and the
``grouper run`` flags with their GROUPER_* environment variables."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from grouper.core.config import GroupingConfig
from grouper.kube.cache import slim_pod
from grouper.kube.informer import strip_managed_fields
from grouper.kube.transport import RateLimiter, describe_request, object_path
from grouper.runtime.settings import RunSettings, add_flags, env_name


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", None, ("get", "pods")),
        ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "pods")),
        ("GET", "/api/v1/pods", {"limit": 500}, ("list", "pods")),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", None, ("patch", "pods")),
        ("POST", "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups", None, ("create", "podgroups")),
        ("PUT", "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg", None, ("update", "podgroups")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kai-system/leases/l", None, ("update", "leases")),
        ("GET", "/api/v1/namespaces/ns", None, ("get", "namespaces")),
        ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/x", None, ("get", "priorityclasses")),
        ("GET", "/api/v1/namespaces/ns/pods/p/status", None, ("get", "pods/status")),
        ("GET", "/apis/batch/v1", None, ("get", "discovery")),
        ("GET", "/apis", None, ("get", "discovery")),
    ],
)
def test_request_labels_are_bounded(
    method: str, path: str, params: dict | None, expected: tuple[str, str]
) -> None:
    assert describe_request(method, path, params) == expected


def test_object_path_quotes_names() -> None:
    assert object_path("", "v1", "pods", "ns", "a b") == "/api/v1/namespaces/ns/pods/a%20b"
    assert object_path("run.ai", "v1alpha1", "kartas", None, "k") == "/apis/run.ai/v1alpha1/kartas/k"


class FakeClock:
    """An injected clock: ``sleep`` records the wait and moves the time on by it, at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_token_bucket_allows_burst_then_qps() -> None:
    clock = FakeClock()
    rl = RateLimiter(qps=50, burst=5, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        await rl.acquire()
    assert clock.sleeps == [], "the burst is immediate"
    for _ in range(10):
        await rl.acquire()
    assert clock.sleeps == pytest.approx([0.02] * 10), "then one request per 1/qps"
    clock.now += 0.05  # idle for 2.5 tokens' time: the next two go at once, the third waits half a token
    for _ in range(3):
        await rl.acquire()
    assert clock.sleeps[10:] == pytest.approx([0.01])
    clock.now += 3600  # a long idle time refills the bucket to its burst, no more
    for _ in range(6):
        await rl.acquire()
    assert clock.sleeps[11:] == pytest.approx([0.02])


async def test_token_bucket_serves_concurrent_waiters_fairly() -> None:
    rl = RateLimiter(qps=100, burst=1)
    order: list[int] = []

    async def req(i: int) -> None:
        await rl.acquire()
        order.append(i)

    await asyncio.gather(*(req(i) for i in range(10)))
    assert order == list(range(10))


def test_slim_pod_keeps_only_what_grouping_reads() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "annotations": {"x": "y"},
            "ownerReferences": [{"kind": "Job"}],
            "generateName": "p-",
            "creationTimestamp": "t",
            "managedFields": [{"manager": "kcm"}],
            "finalizers": ["f"],
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeName": "n1",
            "priorityClassName": "train",
            "containers": [{"name": "c", "image": "i", "env": [{"name": "SECRET", "value": "v"}]}],
            "volumes": [{"name": "v"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}], "podIP": "10.0.0.1"},
    }
    slim = slim_pod(pod)
    assert slim == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "t",
            "labels": {"a": "b"},
            "annotations": {"x": "y"},
            "ownerReferences": [{"kind": "Job"}],
            "generateName": "p-",
        },
        "spec": {"schedulerName": "kai-scheduler", "priorityClassName": "train", "nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    assert (
        "managedFields"
        not in strip_managed_fields({"metadata": {"managedFields": [], "name": "x"}})["metadata"]
    )


def parse(argv: list[str], env: dict[str, str] | None = None) -> RunSettings:
    p = argparse.ArgumentParser()
    add_flags(p, env or {})
    return RunSettings.from_args(p.parse_args(argv))


def test_flags_have_kai_defaults() -> None:
    s = parse([])
    assert (s.scheduler_name, s.queue_label_key, s.nodepool_label_key) == (
        "kai-scheduler",
        "kai.scheduler/queue",
        "kai.scheduler/node-pool",
    )
    # deliberate difference (docs/compatibility.md): no client-side limit, 32 workers; KAI's flags still set them
    assert (s.qps, s.burst, s.max_concurrent_reconciles) == (0.0, 300, 32)
    kai = parse(["--qps", "50", "--burst", "300", "--max-concurrent-reconciles", "10"])
    assert (kai.qps, kai.burst, kai.max_concurrent_reconciles) == (50.0, 300, 10)
    assert (s.leader_elect, s.generic_karta_fallback, s.knative_gang_schedule, s.search_legacy_pg) == (
        False,
        True,
        True,
        True,
    )
    # ours: streaming lists unless told otherwise (tests/integration/test_rbac.py runs both ways)
    assert s.watch_list is True and parse(["--watch-list=false"]).watch_list is False
    assert (s.leader_election_namespace, s.http_bind_address, s.log_format) == (
        "kai-system",
        "127.0.0.1:8080",  # loopback by default; the chart passes the pod address
        "json",
    )


def test_grouping_flags_have_the_same_defaults_in_plan_explain_and_run() -> None:
    from grouper.cli.common import grouping_config
    from grouper.cli.main import build_parser

    parser = build_parser()
    run_config = parse([]).grouping_config()
    assert run_config == GroupingConfig()
    assert grouping_config(parser.parse_args(["plan", "-f", "x.yaml"])) == run_config
    assert grouping_config(parser.parse_args(["explain", "some-pod"])) == run_config


def test_flags_and_environment() -> None:
    env = {
        env_name("scheduler-name"): "other",
        env_name("leader-elect"): "true",
        env_name("qps"): "5",
        env_name("pod-label-selector"): "a=b, c=d",
    }
    s = parse([], env)
    assert (s.scheduler_name, s.leader_elect, s.qps, s.pod_label_selector) == ("other", True, 5.0, "a=b,c=d")
    # the command line wins over the environment; booleans take --flag, --flag=false
    s = parse(["--scheduler-name", "cli", "--leader-elect=false", "--knative-gang-schedule=false"], env)
    assert (s.scheduler_name, s.leader_elect, s.knative_gang_schedule) == ("cli", False, False)
    assert parse(["--leader-elect"]).leader_elect is True
    assert env_name("default-priorities-configmap-name") == "GROUPER_DEFAULT_PRIORITIES_CONFIGMAP_NAME"


@pytest.mark.parametrize(
    "argv",
    [
        ["--pod-label-selector", "a!=b"],
        ["--burst", "0"],
        ["--log-format", "xml"],
        ["--http-bind-address", "nope"],
        ["--leader-elect=maybe"],
    ],
)
def test_bad_flags_are_rejected(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_bad_environment_value_is_rejected() -> None:
    with pytest.raises(SystemExit):
        parse([], {env_name("max-concurrent-reconciles"): "many"})


def test_grouper_run_without_cluster_config_exits_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from grouper.cli.main import main

    missing = tmp_path / "missing-kubeconfig"
    assert (
        main(
            [
                "run",
                "--kubeconfig",
                str(missing),
                "--http-bind-address",
                "127.0.0.1:0",
                "--log-level",
                "error",
            ]
        )
        == 2
    )
    assert "missing-kubeconfig" in capsys.readouterr().err


def test_event_loop_flag_picks_uvloop_unless_told_otherwise() -> None:
    import uvloop

    from grouper.cli.commands.run import loop_factory

    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None  # asyncio.Runner's default: the standard library's loop
    p = argparse.ArgumentParser()
    add_flags(p, environ={"GROUPER_EVENT_LOOP": "asyncio"})
    assert p.parse_args([]).event_loop == "asyncio"
    with pytest.raises(SystemExit):
        p.parse_args(["--event-loop", "tokio"])
