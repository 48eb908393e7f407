"""Development tooling, not part of the product: not in the wheel or the image, never imported by ``grouper``.

``devtools.cluster``: a local control plane built from Go source (``make cluster``, the tests' ``cluster``
fixture, ``python -m devtools.cluster``); ``devtools.demo``: ``make demo``. Importable from a checkout
(pytest's ``pythonpath``, ``python -m`` from the repository root).
"""
