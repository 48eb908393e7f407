"""AmlJob grouper (KAI ``aml_grouper_test.go``): minMember from ``AZUREML_NODE_COUNT``."""

from __future__ import annotations

from typing import Any

import pytest
from builders import context, owner, pod

from grouper.model.errors import InvalidWorkload
from grouper.plugins.aml import AmlGrouper


def aml(count: Any = None) -> dict:
    envs = {} if count is None else {"AZUREML_NODE_COUNT": count}
    return owner("AmlJob", "amlarc.azureml.com/v1alpha1", "aml", uid="a-1",
                 spec={"job": {"options": {"envs": envs}}})


@pytest.mark.parametrize("count", [4, "4"])
def test_GetPodGroupMetadata(count: Any) -> None:
    md = AmlGrouper().metadata(context(pod(), aml(count)))
    assert (md.min_member, md.name, md.priority_class_name) == (4, "pg-aml-a-1", "train")
    assert md.provenance["minMember"] == "spec.job.options.envs.AZUREML_NODE_COUNT of AmlJob test_namespace/aml"


def test_GetPodGroupMetadataWithoutReplicas() -> None:
    with pytest.raises(InvalidWorkload) as err:
        AmlGrouper().metadata(context(pod(), aml()))
    assert str(err.value) == "AmlJob test_namespace/aml: field spec.job.options.envs.AZUREML_NODE_COUNT: is missing"


@pytest.mark.parametrize(("count", "message"), [("two", '"two" is not an integer'), (-1, "-1 is not valid"),
                                                (True, "True is not an integer"), (2**40, "out of range")])
def test_bad_node_count(count: Any, message: str) -> None:
    with pytest.raises(InvalidWorkload, match=message):
        AmlGrouper().metadata(context(pod(), aml(count)))
