"""Errors shown to users. Each area subclasses QgpuError; the CLI prints the message without a traceback."""


class QgpuError(Exception):
    """Base class: the message names the problem (what, where, which limit and by how much)."""
