"""HTTP API of a running grouper (FastAPI on the controller's loop, one port): health, metrics, PodGroups,
workloads and Karta definitions. Entry point: :func:`grouper.api.app.create_app` over an
:class:`grouper.api.state.AppState`."""
