"""Real third-party programs the tests drive (Prometheus, Chromium), installed from Debian's packages."""
