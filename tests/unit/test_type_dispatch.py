"""util.dispatch.TypeDispatch: per-class handler methods, looked up by exact class."""

from __future__ import annotations

import pytest

from tessera.util.dispatch import TypeDispatch


class Shape:
    pass


class Square(Shape):
    def __init__(self, side: int) -> None:
        self.side = side


class Circle(Shape):
    pass


class BigSquare(Square):
    pass


_AREA: TypeDispatch[Renderer, Shape, str] = TypeDispatch()


class Renderer:
    prefix = "area"

    def area(self, shape: Shape) -> str | None:
        handler = _AREA.get(type(shape))
        return None if handler is None else handler(self, shape)

    @_AREA.register(Square)
    def _square(self, shape: Square) -> str:
        return f"{self.prefix} {shape.side * shape.side}"


def test_a_registered_method_handles_its_class_and_stays_a_method():
    assert Renderer().area(Square(3)) == "area 9"
    assert Renderer()._square(Square(2)) == "area 4"


def test_lookup_is_by_exact_class():
    assert Renderer().area(Circle()) is None
    assert Renderer().area(BigSquare(2)) is None  # like a dict keyed on type(node)


def test_a_class_registers_once():
    with pytest.raises(ValueError, match="Square has a handler already"):
        _AREA.register(Square)(lambda owner, shape: "again")
