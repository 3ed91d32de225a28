"""A table of per-class handler methods, for code that walks IR nodes of many classes.

A renderer registers one method per node class, next to the method:

    _STMTS: TypeDispatch[Writer, Stmt, None] = TypeDispatch()

    class Writer:
        def stmt(self, s: Stmt) -> None:
            handler = _STMTS.get(type(s))
            ...
            handler(self, s)

        @_STMTS.register(For)
        def _for(self, s: For) -> None: ...

`register` lets the type checker see that each method takes the class it is
registered for, which a plain `dict[type, Callable[[Writer, Stmt], None]]`
cannot express (the methods take subclasses). Lookup is by the exact class,
as a dict's is: a subclass without a handler of its own has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

OwnerT = TypeVar("OwnerT")  # the class whose methods the handlers are
NodeT = TypeVar("NodeT")  # the base class of the nodes
ResultT = TypeVar("ResultT")
KindT = TypeVar("KindT")  # one node class


class TypeDispatch(Generic[OwnerT, NodeT, ResultT]):
    """Handlers `(owner, node) -> result`, one per node class."""

    def __init__(self) -> None:
        # The handler of class K takes a K (`register` checks it), so it may be called with
        # any node whose exact class is K: the table itself can only say "some node".
        self._handlers: dict[type, Callable[[OwnerT, Any], ResultT]] = {}

    def register(self, kind: type[KindT]) -> Callable[[Callable[[OwnerT, KindT], ResultT]],
                                                      Callable[[OwnerT, KindT], ResultT]]:
        """Decorator: the method below handles nodes of class `kind`."""
        def add(handler: Callable[[OwnerT, KindT], ResultT]) -> Callable[[OwnerT, KindT], ResultT]:
            if kind in self._handlers:
                raise ValueError(f"{kind.__name__} has a handler already")
            self._handlers[kind] = handler
            return handler

        return add

    def get(self, kind: type[NodeT]) -> Callable[[OwnerT, NodeT], ResultT] | None:
        """The handler of nodes of exactly class `kind`, or None."""
        return self._handlers.get(kind)
