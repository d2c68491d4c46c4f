"""Plugin selection (per guest; switching never moves tensors)."""

from wit_world.imports import plugins as _p


def list():  # noqa: A001 - mirrors the Rust SDK's plugin::list
    return _p.list()


def active():
    return _p.active()


def select(name):
    _p.select(name)
