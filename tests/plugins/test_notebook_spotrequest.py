"""Notebook (fallback ``build``) and SPOTRequest (fallback ``inference``) groupers."""

from __future__ import annotations

from builders import context, owner, pod, priority_class

from grouper.plugins.notebook import NotebookGrouper
from grouper.plugins.spotrequest import SpotRequestGrouper


def test_Notebook_DefaultPriorityClassIsBuildNotTrain() -> None:
    nb = owner("Notebook", "kubeflow.org/v1beta1", "nb", uid="n-1", annotations={"kai.scheduler/topology": "t"})
    md = NotebookGrouper().metadata(context(pod(), nb))
    assert (md.priority_class_name, md.min_member, md.name) == ("build", 1, "pg-nb-n-1")
    assert md.topology.topology == "t"
    assert NotebookGrouper().name == "Kubeflow Notebook Grouper"


def test_Notebook_ExplicitPriorityClassFromOwnerLabel() -> None:
    nb = owner("Notebook", "kubeflow.org/v1beta1", "nb", labels={"priorityClassName": "interactive"})
    assert NotebookGrouper().metadata(context(pod(), nb, objects=[priority_class("interactive")])) \
        .priority_class_name == "interactive"


def test_Notebook_InvalidPriorityLabelFallsBackToBuild() -> None:
    nb = owner("Notebook", "kubeflow.org/v1beta1", "nb", labels={"priorityClassName": "missing"})
    assert NotebookGrouper().metadata(context(pod(), nb)).priority_class_name == "build"


def test_SpotRequest_GetPodGroupMetadata() -> None:
    spot = owner("SPOTRequest", "egx.nvidia.io/v1", "spot", uid="s-1", labels={"kai.scheduler/queue": "q"})
    md = SpotRequestGrouper().metadata(context(pod(), spot))
    assert (md.priority_class_name, md.queue, md.name) == ("inference", "q", "pg-spot-s-1")
