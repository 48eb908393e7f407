"""``grouper run`` flags added for KAI v0.18: names, aliases, defaults, environment, effect on grouping."""

from __future__ import annotations

import argparse

import pytest

from grouper.core.config import GroupingConfig
from grouper.runtime.settings import RunSettings, add_flags


def parse(argv: list[str], env: dict[str, str] | None = None) -> RunSettings:
    p = argparse.ArgumentParser()
    add_flags(p, env or {})
    return RunSettings.from_args(p.parse_args(argv))


def test_deployment_gang_schedule_defaults_to_true_like_kai() -> None:
    s = parse([])
    assert s.deployment_gang_schedule is True and s.knative_gang_schedule is True
    assert GroupingConfig.from_flags(s).deployment_gang_schedule is True


@pytest.mark.parametrize("argv", [["--deployment-gang-schedule=false"], ["--gang-schedule-deployment=false"],
                                  ["--gang-schedule-deployment", "false"]])
def test_deployment_gang_schedule_off_by_kai_flag_or_config_name(argv: list[str]) -> None:
    s = parse(argv)
    assert s.deployment_gang_schedule is False
    assert s.grouping_config().deployment_gang_schedule is False


@pytest.mark.parametrize("argv", [["--knative-gang-schedule=false"], ["--gang-schedule-knative=false"]])
def test_knative_gang_schedule_both_names(argv: list[str]) -> None:
    assert parse(argv).grouping_config().knative_gang_schedule is False


def test_environment_variable_follows_kai_flag_name() -> None:
    assert parse([], {"GROUPER_DEPLOYMENT_GANG_SCHEDULE": "false"}).deployment_gang_schedule is False
    # the command line wins
    assert parse(["--gang-schedule-deployment=true"], {"GROUPER_DEPLOYMENT_GANG_SCHEDULE": "false"}
                 ).deployment_gang_schedule is True


def test_bad_boolean_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--gang-schedule-deployment=maybe"])
    assert exc.value.code == 2
    assert "not a boolean: 'maybe'" in capsys.readouterr().err
