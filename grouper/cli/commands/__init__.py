"""Each module here exposes ``register(subparsers)`` adding one top-level subcommand.

The subcommand's handler is set with ``parser.set_defaults(func=handler)``; a handler takes the
parsed ``argparse.Namespace`` and returns the process exit code.
"""
