"""Command groups of the ``joulehouse`` CLI; each module has ``register(subparsers)``."""
