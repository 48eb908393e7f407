"""The workload context: what one planning pass over a workload's pods computes once, not once per pod.

Whoever plans builds one at the start of a pass and drops it at its end — the reconciler's pass, ``grouper
plan`` / ``why`` / ``impact`` (through :func:`grouper.core.workload_plan.plan_workload`'s callers), the
admission webhook's single decision (``Grouper.decide`` makes a context of one pod) — and hands it to every
``Grouper.decide`` of the pass. It holds:

* **owner chains**, walked once: a pod with a single owner reference has the chain of that owner whatever
  its own fields, so its siblings reuse it. Only a chain walked to the end is shared (a truncated walk, an
  error, a multi-owner pod's notes are the pod's own; a pod owned by a pod walks alone);
* **each plugin's per-workload part** (:class:`Preparing`: a JobSet's sub-groups, a Karta definition's one
  sandbox run over the root and the pass's pods), computed at the first pod that needs it, then each pod's
  cheap placement reads it (``GroupingContext.prepared``). A ``GroupingError`` it raised is the answer for
  every pod of that top owner;
* **the step-aside rules' owner part** per owner chain (:meth:`WorkloadContext.of_chain`): a chain's
  owners are the same objects for every pod that shares it;
* **the PodGroup rules' answer** per distinct PodGroup (:mod:`.validation`): every pod of a workload sees
  the same one;
* **what a plugin derives from its owner's pods** (:meth:`WorkloadContext.from_pods`: whether a Deployment's
  or a Knative Revision's pods already have a PodGroup each), listed once per pass instead of once per pod.
  It needs no invalidation: a pass that lists pods keeps neither its decisions nor its context
  (:mod:`.workload_plan`), so it lives exactly one pass.

It is valid for one unchanging view of the cluster: a pass that yields to the event loop (the cache may have
moved on) starts a new one; a Karta pass decided in a worker thread reads a snapshot the loop took for it
(``grouper.kube.lookup_snapshot``), which does not move. The controller keeps a pass's context with the
decisions it kept (:class:`grouper.controller.plans.PlanCache`) for the workload's next pass, and drops it
with them when anything they read changes; so it is never invalidated on its own, and never shared between
threads (the Karta path does not keep it). What it holds grows with the workload's distinct owners and
PodGroups, not its pods. Pure: it reads only what the decisions hand it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from grouper.core.lookups import Lookups
from grouper.core.owner_chain import OwnerChain, owner_key, resolve_owners
from grouper.core.validation import pod_group_key, validate_pod_group
from grouper.model import objects as o
from grouper.model.errors import GroupingError
from grouper.model.objects import Obj
from grouper.model.podgroup import PodGroupMetadata

T = TypeVar("T")


@runtime_checkable
class Preparing(Protocol):
    """A plugin whose decision has a per-workload part: ``prepare`` computes it once per pass from the top
    owner (and, where batching pays, the pass's pods: ``pods`` may be empty, or hold pods of other workloads
    of the same namespace); ``metadata`` reads it through ``ctx.prepared(self)`` and places the pod. It reads
    no lookups (what it read would be no decision's dependency) and must give what computing it in every
    pod's decision would: it changes no decision, only its cost."""

    def prepare(self, top_owner: Obj, pods: Sequence[Obj]) -> Any: ...


class WorkloadContext:
    """One planning pass's shared work (see the module doc). ``pods``: the pods a plugin may prepare for
    together — the pods of one workload the pass decides (empty when the pass spans several workloads)."""

    __slots__ = ("_chains", "_once", "_validated", "pods")

    def __init__(self, pods: Sequence[Obj] = ()) -> None:
        self.pods = pods
        self._chains: dict[tuple[str, str, str, str, str], OwnerChain] = {}
        self._validated: dict[tuple[Any, ...], list[str]] = {}
        # what is computed once per pass (:meth:`_computed_once`): (what, owner identity) -> (the objects it was
        # computed for, held so that no id() in the key is reused while the context lives; the value; the
        # GroupingError it raised)
        self._once: dict[tuple[Hashable, Any], tuple[Any, Any, GroupingError | None]] = {}

    def chain(self, pod: Obj, lookups: Lookups) -> OwnerChain:
        """The pod's owner chain: its siblings' when one was walked to the end in this pass (the reads of a
        shared walk are the first sibling's, on its lookups)."""
        key = owner_key(pod)
        if key is None or len(o.owner_references(pod)) != 1:  # several: the walk's notes name the pod
            return resolve_owners(pod, lookups)
        chain = self._chains.get(key)
        if chain is None:
            chain = resolve_owners(pod, lookups)
            if chain.truncated is None and chain.owners:
                self._chains[key] = chain
        return chain

    def prepared(self, plugin: Preparing, top_owner: Obj) -> Any:
        """``plugin``'s per-workload part for ``top_owner`` (told apart as :func:`_identity` says), prepared
        at the first call of the pass."""
        return self._computed_once((id(plugin), _identity(top_owner)), (plugin, top_owner),
                                   lambda: plugin.prepare(top_owner, self.pods))

    def from_pods(self, what: Hashable, owner: Obj, derive: Callable[[], T]) -> T:
        """What ``derive`` makes of ``owner``'s pods (it lists them through the first asking pod's lookups),
        derived once per pass: its siblings get the same value, or the same ``GroupingError``, without
        listing again — a 1,000-pod Deployment deciding 300 new pods lists 300 pods once, not 300 times.
        The list's reads are the first decision's; the pass's dependencies are the union of its decisions'.
        Anything else ``derive`` raises (a kind not cached yet) is not kept: the next pod asks again."""
        return cast(T, self._computed_once((what, _identity(owner)), owner, derive))

    def of_chain(self, what: Hashable, chain: OwnerChain, compute: Callable[[], T]) -> T:
        """What ``compute`` derives from ``chain``'s owners alone (the step-aside rules' owner part), once per
        chain: the pods sharing a walked chain (:meth:`chain`) share the value, or the ``GroupingError``."""
        return cast(T, self._computed_once((what, id(chain)), chain, compute))

    def _computed_once(self, key: tuple[Hashable, Any], hold: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` at the first call with ``key`` in the pass, its value (or the ``GroupingError`` it
        raised, raised again) at every later one."""
        hit = self._once.get(key)
        if hit is None:
            try:
                hit = (hold, compute(), None)
            except GroupingError as exc:
                hit = (hold, None, exc)
            self._once[key] = hit
        if hit[2] is not None:
            raise hit[2]
        return hit[1]

    def validate(self, md: PodGroupMetadata) -> list[str]:
        """The PodGroup rules' errors for ``md`` (:func:`validate_pod_group`), checked once per distinct
        PodGroup in the pass."""
        try:
            key = pod_group_key(md)
            known = self._validated.get(key)
        except TypeError:  # a field of an unhashable type (a hostile definition's output): checked alone
            return validate_pod_group(md)
        if known is None:
            known = self._validated[key] = validate_pod_group(md)
        return list(known)


def _identity(owner: Obj) -> Any:
    """An owner told apart by uid and resourceVersion (a skipped owner's merged view of the kind below it is
    a new object per pod, the same object all the same), else by identity (its holder keeps it alive)."""
    meta = o.meta(owner)
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    return (uid, version) if isinstance(uid, str) and uid and isinstance(version, str) and version else id(owner)


__all__ = ["Preparing", "WorkloadContext"]
