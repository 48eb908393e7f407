"""``make demo BACKEND=upstream``: the sample JobSet through the webhook, the upstream objects and the
real kube-scheduler onto simulated nodes, printed pod by pod with its node."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.gang
def test_demo_upstream_binds_the_sample_jobset_together(sched_cluster: object) -> None:  # binaries built
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--backend", "upstream", "--once"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "all pods of JobSet default/demo bound" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("demo-")]
    assert len(rows) == 3, out
    assert all(
        r[1] == "Running" and r[2].startswith("kwok-node-") and r[3].startswith("pg-demo-") for r in rows
    ), out  # the demo's whole output says which part is not: `-` in SCHEDULING-GROUP is a pod the webhook
    # did not see (it was once the grouper reported ready before its webhook listened)
    assert len({r[3] for r in rows}) == 1  # one gang
    assert "minCount: 3" in out
    # the real JobSet controller's pods, bound: describe shows the whole gang ready on its nodes
    assert re.search(r"replicatedjob\s+3/3 ready\s+gpu: 12\s+kwok-node-", out), out
