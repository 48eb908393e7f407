"""The cluster-fixture factory (tests/clusters.py) without starting a cluster: which marks a cluster's
options give, and that fixtures asking for the same options share one cluster, stopped after its last user."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from clusters import DEPLOY_CRDS, SPECS, ClusterSpec, Pool, cluster_fixture


def spec(name: str, **options: Any) -> ClusterSpec:
    cluster_fixture(name, **options)
    return SPECS.pop(name)[-1]


def test_marks_follow_the_options() -> None:
    assert spec("t_plain").marks == ("cluster",)
    assert spec("t_sched", scheduler=True).marks == ("cluster", "gang")
    assert spec("t_nodes", kwok_nodes=2).marks == ("cluster", "gang")
    assert spec("t_ops", crds=DEPLOY_CRDS, operators=["jobset"]).marks == ("cluster", "operators")
    assert spec("t_ops", operators=["jobset"]).operators == ("jobset",)


def test_the_same_options_under_two_names_share_one_cluster_until_the_last_user_is_done() -> None:
    started: list[str] = []
    stopped: list[str] = []

    @contextmanager
    def starter(s: ClusterSpec, _: Any) -> Iterator[str]:
        started.append(s.name)
        yield f"cluster of {s.name}"
        stopped.append(s.name)

    pool = Pool(starter)
    a = spec("t_a", scheduler=True, apiserver_args=["--x=1"])
    b = spec("t_b", apiserver_args=("--x=1",), scheduler=True)  # same options, other order and sequence type
    other = spec("t_c", scheduler=True, apiserver_args=["--x=2"])
    assert a.key == b.key != other.key
    with pool.use(a, None) as ca:
        with pool.use(b, None) as cb, pool.use(other, None) as cc:
            assert ca == cb == "cluster of t_a" and cc == "cluster of t_c"
            assert started == ["t_a", "t_c"]
        assert stopped == ["t_c"], "the shared one still has a user"
    assert stopped == ["t_c", "t_a"]
    with pool.use(b, None) as again:
        assert again == "cluster of t_b", "stopped clusters are not handed out again"
