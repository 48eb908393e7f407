"""``make demo`` end to end: its own control plane, ``grouper run`` as a ServiceAccount, the sample JobSet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def test_demo_groups_the_sample_jobset(cluster: object) -> None:  # cluster: binaries are built
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--once"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "all pods of JobSet default/demo grouped" in out
    # only the JobSet was submitted: the real JobSet controller created the Jobs
    assert "created JobSet default/demo; the JobSet controller creates its Jobs" in out
    assert "created Job " not in out
    # The PodGroup as stored: two replicatedJobs, each a parent with one replica leaf.
    assert "minSubGroup: 2" in out
    assert re.search(r"- minMember: 1\n\s+name: worker-replica-0\n\s+parent: worker", out)
    assert re.search(r"- minMember: 1\n\s+name: worker-replica-1\n\s+parent: worker", out)
    assert re.search(r"- minMember: 1\n\s+name: leader-replica-0\n\s+parent: leader", out)
    assert re.search(r"- minSubGroup: 2\n\s+name: worker", out), "the worker replicatedJob has 2 replicas"
    # The article's describe: the tree and a per-instance Resources table, 12 GPUs in all.
    assert re.search(r"^TOTAL\s+3\s+12\s", out, re.M), out
    assert re.search(r"^leader\s+1\s+4\s", out, re.M) and re.search(r"^worker\s+2\s+8\s", out, re.M)
    # The workload list of the article, with the gang's state (no scheduler in the KAI demo: never admitted)
    assert re.search(r"^default\s+demo\s+JobSet\s+\S+\s+(Grouping|Waiting)\s+leader\(1\), worker\(2\)\s+12\s", out,
                     re.M), out
    # Every pod carries its group and sub-group.
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("demo-") and "pg-demo-" in ln]
    assert len(rows) == 3
    assert {r[3] for r in rows} == {"leader-replica-0", "worker-replica-0", "worker-replica-1"}
    assert all(r[2].startswith("pg-demo-") for r in rows)
    # The decision record came from the grouper's HTTP API.
    assert '"plugin": "JobSet Grouper"' in out
    assert "label kai.scheduler/queue on JobSet default/demo" in out
