"""The read-only web view, served under ``/ui/`` by the API's own server (docs/operations.md, "Web view").

Design: a browser's navigation cannot carry an ``Authorization`` header and the API is GET-only (no login
form, no cookie session). So ``/ui/`` is a static page shell with no cluster data in it (public, like a login
page); its script (``static/app.js``) keeps the bearer token the person pastes in ``sessionStorage`` (gone
when the tab closes, never sent anywhere but this origin) and fetches server-rendered HTML fragments
(``/ui/fragments/...``) with ``Authorization: Bearer ...``. Each fragment route is in the permission table
with exactly its JSON twin's permission (``permissions.UI_TWINS``), and is built from the same view
functions, so a token without rights gets the same 401 / 403 and never another namespace's data.

Every fragment is built with :mod:`grouper.api.ui.html`, which escapes all data; the pages carry a strict
Content-Security-Policy (no inline script or style, nothing from elsewhere, Trusted Types). No build
toolchain and no external assets: the static files are package data (the wheel ships them).
"""

from grouper.api.ui.routes import CSP, add_ui

__all__ = ["CSP", "add_ui"]
