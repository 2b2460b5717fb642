"""Helpers for components whose ``elaborate`` is split into builder methods that share their
signals through a ``types.SimpleNamespace`` (the engine, the repack unit and control tree)."""

__all__ = ["share"]


def share(namespace, names):
    """Add a builder method's local ``names`` to ``namespace``, where the next builder method
    of the same ``elaborate`` finds them."""
    namespace.__dict__.update({k: x for k, x in names.items() if k not in ("self", "m", "v")})
