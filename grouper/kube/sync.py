"""A blocking façade over the async client, for the command line.

``grouper describe`` / ``explain`` / ``get`` / ``definitions --cluster`` read the cluster synchronously (the
grouping core calls its lookups synchronously). Instead of a second client they drive the one async stack
(:class:`~grouper.kube.transport.KubeClient`, :class:`~grouper.kube.discovery.Discovery`) on a private
event loop, so auth, TLS, paging, retries and errors (:class:`~grouper.kube.transport.ApiError`) behave
exactly as in the controller. Not for use inside a running event loop.

    with SyncKube.connect(kubeconfig, context) as kube:
        pod = kube.get_object("/api/v1/namespaces/default/pods/p")
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine, Mapping
from typing import Any, Self, TypeVar

from grouper.kube import config as kubeconfig
from grouper.kube.config import ClusterConfig, KubeConfigError
from grouper.kube.discovery import Discovery, Resource
from grouper.kube.transport import KubeClient
from grouper.model.objects import GVK

T = TypeVar("T")


class SyncKube:
    """One API server, read synchronously. ``close()`` (or ``with``) when done."""

    def __init__(self, config: ClusterConfig, *, request_timeout: float = 30.0) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        try:
            self.client = self.run(self._open(request_timeout))  # aiohttp wants its loop running
        except (OSError, ssl.SSLError) as e:  # an unreadable CA / client certificate
            self._loop.close()
            raise KubeConfigError(f"cannot use the TLS settings for {config.server}: {e}") from e
        self.discovery = Discovery(self.client)

    @classmethod
    def connect(cls, kubeconfig_path: str | None = None, context: str | None = None) -> SyncKube:
        """Configured like kubectl (:func:`grouper.kube.config.load`); raises :class:`KubeConfigError`."""
        return cls(kubeconfig.load(kubeconfig_path, context))

    async def _open(self, request_timeout: float) -> KubeClient:
        return KubeClient(self.config, request_timeout=request_timeout)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine of the async stack to completion."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self.run(self.client.close())
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def server(self) -> str:
        return self.config.server

    @property
    def namespace(self) -> str:
        """The kubeconfig context's namespace, else ``default``."""
        return self.config.namespace

    # the calls the command line makes; each is the async client's, run to completion

    def get_object(self, path: str) -> dict[str, Any] | None:
        return self.run(self.client.get_object(path))

    def list_items(self, path: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.run(self.client.list_items(path, params))

    def resolve(self, gvk: GVK) -> Resource | None:
        return self.run(self.discovery.resolve(gvk))

    def served(self, group: str, version: str) -> list[Resource]:
        return self.run(self.discovery.served(group, version))

    def preferred_version(self, group: str) -> str | None:
        return self.run(self.discovery.preferred_version(group))
