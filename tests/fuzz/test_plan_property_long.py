"""The long run of the controller's planning property (``tests/controller/test_plan_property.py``):
1,000 generated event sequences (``PLAN_EXAMPLES``), each checked after every reconcile pass. Runs only with
``pytest -m fuzz_long tests/fuzz`` (``make test`` runs it after the suite)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.controller.test_plan_property import SHORT, PlanMachine

# make test runs 1,000 sequences, derandomized (the same ones every run: a regression suite that fits CI's
# budget; they change when the machine's source does); PLAN_EXAMPLES=10000 PLAN_RANDOM=1 explores further
# (~14 min of CPU on a busy 2-core box: ~80 ms per example, docs/performance.md)
EXAMPLES = int(os.environ.get("PLAN_EXAMPLES", "1000"))
LONG = settings(SHORT, max_examples=EXAMPLES, derandomize=os.environ.get("PLAN_RANDOM") != "1")
# A count of examples, not a time: each sequence runs up to 40 steps through the controller, each pass
# checked against a fresh plan of the cluster (every 8th also against a grouper started afresh on it)
LONG_TIMEOUT_S = 7200


@pytest.mark.fuzz_long
@pytest.mark.timeout(LONG_TIMEOUT_S)
def test_plan_property_long() -> None:
    run_state_machine_as_test(PlanMachine, settings=LONG)
