"""A small validator for the JSON files edgespec reads (bundle.json, model.json).

A field of the wrong type or range is refused with its name, its file and the fix, before
any code uses it (a string where a count belongs would otherwise surface as a TypeError
deep in a loader, or a huge count as a huge allocation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgespec.errors import EdgespecError


@dataclass(frozen=True)
class Field:
    kind: str  # "int" (whole number, not a boolean), "str", "float", "object", "list", "bool"
    required: bool = True
    nullable: bool = False
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] | None = None


KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "str": (str,),
    "float": (int, float),
    "object": (dict,),
    "list": (list,),
    "bool": (bool,),
}
NAMES = {
    "int": "a whole number",
    "str": "a string",
    "float": "a number",
    "object": "an object",
    "list": "a list",
    "bool": "true or false",
}


def check_fields(
    doc: Any, fields: dict[str, Field], where: str, fix: str, error: type[EdgespecError]
) -> None:
    """Refuse doc (a parsed JSON object) unless every field in fields fits its Field."""
    if not isinstance(doc, dict):
        raise error(f"{where}: expected a JSON object, got {type_name(doc)}; {fix}")
    for name, field in fields.items():
        if name not in doc:
            if field.required:
                raise error(f"{where}: field {name!r} is missing; {fix}")
            continue
        problem = field_problem(doc[name], field)
        if problem:
            raise error(f"{where}: field {name!r} {problem}; {fix}")


def field_problem(value: Any, field: Field) -> str | None:
    if value is None:
        return None if field.nullable else f"must be {describe(field)}, got null"
    fits = isinstance(value, KINDS[field.kind]) and not (
        field.kind in ("int", "float") and isinstance(value, bool)
    )
    if not fits:
        return f"must be {describe(field)}, got {type_name(value)} {shown(value)}"
    if field.min is not None and value < field.min or field.max is not None and value > field.max:
        return f"must be {describe(field)}, got {value:,}"
    if field.choices is not None and value not in field.choices:
        return f"must be one of {', '.join(field.choices)}, got {shown(value)}"
    return None


def describe(field: Field) -> str:
    text = NAMES[field.kind]
    if field.min is not None and field.max is not None:
        text += f" from {field.min:,} to {field.max:,}"
    elif field.min is not None:
        text += f" >= {field.min:,}"
    return text + (" or null" if field.nullable else "")


def type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
