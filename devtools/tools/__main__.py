"""``python -m devtools.tools``: see :mod:`devtools.tools.install`."""

from .install import main

raise SystemExit(main())
