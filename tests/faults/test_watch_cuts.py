"""Watches that keep breaking (every connection reset by a proxy every second, for 20 s, while workloads
arrive): nothing is missed, nothing is duplicated, and readiness comes back each time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kube import Kube, wait_until

from faults.process import GrouperProcess
from faults.proxy import CuttingProxy
from faults.workloads import create_jobs, create_pods, marks, pod_groups, pods, pods_of


def test_watches_cut_every_second_nothing_missed(
    fault_cluster: Any, fkube: Kube, ns: str, token_file: Path, tmp_path: Path
) -> None:
    url = urlparse(fault_cluster.server)
    proxy = CuttingProxy(url.hostname or "127.0.0.1", int(url.port or 443)).start()
    server = f"https://127.0.0.1:{proxy.port}"  # the serving certificate names 127.0.0.1
    try:
        with GrouperProcess(fault_cluster, token_file, tmp_path, identity="cuts", server=server) as g:
            g.wait_ready()
            names = [f"w{i:02d}" for i in range(20)]
            jobs = create_jobs(fkube, ns, names, 2)
            t0 = time.monotonic()
            for job in jobs:  # one workload a second, a cut between each
                create_pods(fkube, ns, pods_of(job))
                proxy.cut()
                time.sleep(1.0)
            created = time.monotonic()
            ps = wait_until(lambda: (ps := pods(fkube, ns)) and len(ps) == 60 and all(marks(p)[0] for p in ps)
                            and ps, 60, what="every pod grouped despite the cuts")
            done = time.monotonic()
            pgs = pod_groups(fkube, ns)
            assert sorted(pgs) == sorted(f"pg-{j['metadata']['name']}-{j['metadata']['uid']}" for j in jobs)
            assert {marks(p)[0] for p in ps} == set(pgs)
            wait_until(g.ready, 30, what="ready again after the last cut")
            restarts = g.metric("podgrouper_watch_restarts_total", resource="pods")
            assert restarts >= 5, "the pod watch really was cut (a cut during the back-off finds no watch)"
            assert g.metric("podgrouper_task_restarts_total") == 0, "broken watches are not crashes"
    finally:
        proxy.stop()
    print(f"\n[measure] {proxy.cuts} connection cuts over {created - t0:.0f}s: pod watch re-opened "
          f"{restarts:.0f}x; all 60 pods grouped {done - created:.2f}s after the last create")
