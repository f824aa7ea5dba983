"""Pieces of the custom assembly formats the ``mgb``, ``kernel`` and ``layout`` ops share.

An op's format is ``operands {props and attributes} : types``: the properties an op prints beside
its discardable attributes go into one attribute dictionary, and parsing sorts them back by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.parser import Parser
from xdsl.printer import Printer

OpT = TypeVar("OpT", bound=Operation)


def print_attr_dict(printer: Printer, *parts: Mapping[str, Attribute | None]) -> None:
    """`` {...}`` of the entries of ``parts`` (merged in order, ``None`` values left out); nothing
    when none is left."""
    attrs = {name: value for part in parts for name, value in part.items() if value is not None}
    if attrs:
        printer.print_string(" ")
        printer.print_attr_dict(attrs)


def print_unary(printer: Printer, op: Operation, properties: Mapping[str, Attribute | None]) -> None:
    """`` %operand {properties and attributes} : T -> U``, the form of a one-operand, one-result op."""
    printer.print_string(" ")
    printer.print_operand(op.operands[0])
    print_attr_dict(printer, properties, op.attributes)
    printer.print_string(" : ")
    printer.print_attribute(op.operands[0].type)
    printer.print_string(" -> ")
    printer.print_attribute(op.results[0].type)


def parse_unary(parser: Parser) -> tuple[SSAValue, Attribute, dict[str, Attribute]]:
    """The operand, result type and attribute dictionary of :func:`print_unary`'s form."""
    operand = parser.parse_unresolved_operand()
    attrs = dict(parser.parse_optional_attr_dict())
    parser.parse_punctuation(":")
    src = parser.parse_type()
    parser.parse_punctuation("->")
    return parser.resolve_operand(operand, src), parser.parse_type(), attrs


def attach_attrs(op: OpT, attrs: dict[str, Attribute], *properties: str) -> OpT:
    """``op`` given the parsed attribute dictionary ``attrs``: the entries named in ``properties`` as
    properties, the rest as discardable attributes."""
    for name in properties:
        if name in attrs:
            op.properties[name] = attrs.pop(name)
    op.attributes.update(attrs)
    return op
