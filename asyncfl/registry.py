"""``Registry``: the base class of the kind tables of :mod:`asyncfl.config.registries` (each a
:class:`~asyncfl.components.registry.KindTable`, a live view of the component registry).

It holds no names and loads nothing: plug-ins are declared and found through
:mod:`asyncfl.components` alone (docs/extending.md). The name is kept for tools that ask
``isinstance(table, Registry)`` to find the kind tables.
"""

from __future__ import annotations


class Registry:
    """A table of names (:attr:`names`) of one kind, answered by a subclass."""

    kind: str

    @property
    def names(self) -> tuple[str, ...]:
        raise NotImplementedError
