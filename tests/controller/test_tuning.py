"""The controller's tuning knobs are one object, passed in: every piece takes its values from
``ControllerSettings.tuning`` (what a test overrides instead of patching module constants)."""

from __future__ import annotations

import dataclasses
import inspect
import sys

import pytest

from grouper.controller.controller import ControllerSettings
from grouper.controller.tuning import DEFAULT_TUNING, Tuning
from grouper.observability.metrics import Metrics
from grouper.runtime.composition import build_grouper
from grouper.runtime.supervisor import Supervisor
from grouper.runtime.wiring import build_controller


def test_every_piece_takes_the_controllers_tuning() -> None:
    t = Tuning(kept_idle_seconds=7.0, settle_min_pods=3, retry_base_seconds=0.25, retry_max_seconds=2.0,
               deleted_owner_seconds=9.0, resync_chunk=11)
    ctl = build_controller(object(), ControllerSettings(tuning=t), grouper=build_grouper(),  # type: ignore[arg-type]
                           metrics=Metrics(), supervisor=Supervisor())
    assert (ctl.plans.idle_seconds, ctl.plans.settle_min_pods) == (7.0, 3)
    assert (ctl.queue.base_delay, ctl.queue.max_delay) == (0.25, 2.0)
    assert ctl.reconciler.deleted.memory == 9.0 and ctl.resync.chunk == 11
    assert ctl.reconciler.tuning is t and ctl.handlers.tuning is t


def test_tuning_is_frozen_and_documented() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_TUNING.settle_min_pods = 1  # type: ignore[misc]
    source = inspect.getsource(sys.modules[Tuning.__module__])
    for f in dataclasses.fields(Tuning):  # each field is followed by its docstring
        assert f'{f.name}: {f.type} = ' in source and '"""' in source.split(f"{f.name}: ", 1)[1].split("\n", 2)[1]


def test_workers_and_patch_slots_follow_max_concurrent_reconciles() -> None:
    # what --max-concurrent-reconciles promises (docs/operations.md): that many workers, and twice that many pod
    # patches in flight; the writes in flight are counted at a held API server in tests/controller/test_reconciler.py
    ctl = build_controller(object(), ControllerSettings(max_concurrent_reconciles=7),  # type: ignore[arg-type]
                           grouper=build_grouper(), metrics=Metrics(), supervisor=Supervisor())
    assert ctl.reconciler.patcher.concurrency == 14 and ctl.workers.size == 7
