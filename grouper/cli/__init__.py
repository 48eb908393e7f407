"""The ``grouper`` command line: one entry point, one module per subcommand in ``commands/``."""
