"""Store namespaces of long-term records, built from their parts and read back.

:func:`namespace` joins parts injectively: scope ids are arbitrary user strings, and no id may
name another scope's namespace (``user`` ``"a:b"`` is not ``user`` ``"a"`` with a suffix
``"b"``). :func:`parse_namespace` splits one back into its parts.
"""

from __future__ import annotations

__all__ = ["namespace", "parse_namespace"]

# Only these two characters are escaped, so namespaces stay readable: ':' separates parts and
# '%' introduces an escape. Every other character stands for itself, which makes the mapping
# injective for any number of parts.
_ESCAPES = str.maketrans({"%": "%25", ":": "%3A"})


def namespace(*parts: str) -> str:
    """The store namespace of ``parts``, e.g. ``namespace("longterm", "facts", "user", id)``.

    Injective: two different tuples of parts never give the same namespace, whatever
    characters the parts hold, so no scope id can reach into another scope's namespace.
    """
    return ":".join(part.translate(_ESCAPES) for part in parts)


def parse_namespace(name: str) -> list[str]:
    """The parts :func:`namespace` joined into ``name``."""
    return [part.replace("%3A", ":").replace("%25", "%") for part in name.split(":")]
