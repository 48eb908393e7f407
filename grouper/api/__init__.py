"""Read-only HTTP API of a running grouper: health, metrics, PodGroups, pods, workloads, Karta definitions.

Serving
    One port for everything: ``grouper run --http-bind-address`` (default ``0.0.0.0:8080``, i.e. every
    interface; use ``127.0.0.1:8080`` to keep it local). uvicorn runs on the controller's asyncio loop
    (:class:`grouper.api.server.HttpServer`); endpoints only read in-memory state (decision store, informer
    caches), so a slow API server never slows them — except ``/workloads/...?live=true``.

Endpoints (GET only; any other method is 405)
    ``/healthz``   liveness: event loop serving, nothing fatal, workers progressing (or idle / standby)
    ``/readyz``    readiness: pod + PodGroup informers synced, API server answered recently; body has the
                   role (``leader`` / ``standby`` / ``single``) — a standby is ready
    ``/metrics``   Prometheus text, or OpenMetrics when ``Accept: application/openmetrics-text``
    ``/podgroups`` managed PodGroups; ``namespace``, ``kind``, ``plugin``, ``queue``, ``labelSelector``,
                   ``limit`` (1..1000), ``continue``
    ``/podgroups/{namespace}/{name}``        desired PodGroup, sub-groups with pods, decision record
    ``/pods/{namespace}/{name}``             one pod's decision record
    ``/workloads/{namespace}/{kind}/{name}`` describe tree (``?live=true`` reads the workload live)
    ``/definitions``                         Karta definitions with origin, GVK, validity, errors
    ``/docs``, ``/openapi.json``             the schema

Security
    Responses never hold Secrets, environment values, pod specs or pod annotations: pods appear as name,
    phase, node and the labels grouping reads; ``kubectl.kubernetes.io/last-applied-configuration`` on a
    PodGroup is redacted. Every path except ``/healthz`` and ``/readyz`` needs a bearer token, checked with a
    TokenReview, and the caller's Kubernetes permission for what the endpoint shows, checked with a
    SubjectAccessReview (``--http-auth=kubernetes``, the default; :mod:`grouper.api.auth`). The probes stay
    open so kubelet needs no token. ``--http-auth-token-file`` keeps a static one-token mode,
    ``--http-auth=none`` turns authentication off.

Wiring
    ``create_app(state, access=api_access(settings, client))`` with an :class:`grouper.api.state.AppState`
    (or any object with some of its attributes), filled in while the service starts; see
    :mod:`grouper.api.state`. Without ``access`` the app is open (or static-token guarded).
"""
