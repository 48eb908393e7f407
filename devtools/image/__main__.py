"""``python -m devtools.image``: see :mod:`devtools.image.build`."""

from .build import main

raise SystemExit(main())
