"""Typed, frozen dataclasses built strictly from plain mappings (parsed YAML).

`build(cls, data, path)` checks every key against the dataclass's fields ("did you mean"
for the unknown ones), every value against its field's annotation, numeric values (and each
number of a list) against the bounds declared with `bounded`, and values against the check
declared with `checked`; each error names the dotted key, the value and what is valid, in
one line.

Written here rather than taken from a library because it is small, and the libraries that
do this (pydantic, omegaconf) either do not name the dotted key and the valid range in one
line, or bring a second way to declare fields.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from rayrl.errors import ConfigError, did_you_mean
from rayrl.renamed_keys import Renamed, renamed


def bounded(
    default: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    check: Callable[[Any], str | None] | None = None,
) -> Any:
    """A dataclass field whose numeric value (or each number of a list) is range-checked when
    the config is built, then vetted by `check` when given (see `checked`)."""
    return field(default=default, metadata={"bounds": (gt, ge, le, lt), "check": check})


def checked(default: Any, check: Callable[[Any], str | None]) -> Any:
    """A dataclass field whose value `check` vets when the config is built, for rules that a
    type and bounds cannot say: it returns None for a valid value, else what is wrong and
    what is valid (the error starts with the dotted key and the value)."""
    return field(default=default, metadata={"check": check})


def build(cls: type, data: Any, path: str) -> Any:
    """Build dataclass `cls` from `data`, checking keys, types and bounds; `path` is dotted."""
    where = path or "the config"
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            raise ConfigError(unknown_key(str(key), path, fields, data[key]))
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        dotted = f"{path}.{name}" if path else name
        value = coerce(hints[name], data[name], dotted)
        check_bounds(f, value, dotted)
        check_value(f, value, dotted)
        kwargs[name] = value
    return cls(**kwargs)


def unknown_key(key: str, path: str, valid: Mapping[str, Any], value: Any = None) -> str:
    """The error for an unknown key: where it moved, or the close matches and the valid keys."""
    dotted = f"{path}.{key}" if path else key
    entry = renamed(dotted)
    if entry is not None:
        while isinstance(value, Mapping) and value:  # name the key the user wrote
            first = next(iter(value))
            dotted, value = f"{dotted}.{first}", value[first]
        below = dotted[len(entry.old) :]
        moved = Renamed(entry.old + below, tuple(new + below for new in entry.new))
        return f"unknown key '{dotted}': {moved.names_new()}"
    return (
        f"unknown key '{dotted}'{did_you_mean(key, valid)}; "
        f"valid keys in {path or 'the config'}: {', '.join(valid)}"
    )


def check_bounds(f: dataclasses.Field, value: Any, dotted: str) -> None:
    """Raise if a bounded numeric field, or a number of a bounded list, is out of range."""
    bounds = f.metadata.get("bounds")
    if bounds is None or value is None:
        return
    if isinstance(value, tuple):
        for i, number in enumerate(value):
            check_bounds(f, number, f"{dotted}[{i}]")
        return
    gt, ge, le, lt = bounds
    checks = [
        (gt, lambda v, b: v > b, "> {}"),
        (ge, lambda v, b: v >= b, ">= {}"),
        (le, lambda v, b: v <= b, "<= {}"),
        (lt, lambda v, b: v < b, "< {}"),
    ]
    valid = [text.format(bound) for bound, _, text in checks if bound is not None]
    for bound, ok, _ in checks:
        if bound is not None and not ok(value, bound):
            raise ConfigError(f"{dotted}={value!r} is out of range; valid: {' and '.join(valid)}")


def check_value(f: dataclasses.Field, value: Any, dotted: str) -> None:
    """Raise if a `checked` field's check finds its value invalid."""
    check = f.metadata.get("check")
    if check is None or value is None:
        return
    problem = check(value)
    if problem is not None:
        raise ConfigError(f"{dotted}={value!r} {problem}")


def describe(tp: Any) -> str:
    """A short human description of a type annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin in (tuple, list):
        return f"a list of {describe(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping of keys"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp)
    )


def coerce(tp: Any, value: Any, dotted: str) -> Any:
    """Check `value` against annotation `tp` and return it in canonical form."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{dotted}={value!r} is not valid; expected {describe(tp)}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, dotted)
    number = as_number(value) if float in (tp, *typing.get_args(tp)) else None
    if number is not None and not math.isfinite(number):  # "inf" and "nan" parse as floats
        raise ConfigError(f"{dotted}={value!r} is not valid; expected a finite number")
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(tp)
        if value is None:
            if type(None) in arms:
                return None
            raise bad
        for arm in arms:
            if arm is type(None):
                continue
            try:
                return coerce(arm, value, dotted)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise bad
        element = typing.get_args(tp)[0]
        return tuple(coerce(element, v, f"{dotted}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        number = as_number(value)
        if number is None or not math.isfinite(number) or float(number) != int(number):
            raise bad
        return int(number)
    if tp is float:
        number = as_number(value)
        if number is None:
            raise bad
        return float(number)
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    raise bad


def as_number(value: Any) -> float | int | None:
    """A number from an int, a float or a numeric string such as "1e-4" (YAML 1.1 reads that
    as a string); None for anything else, booleans included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            return None
        return int(number) if number.is_integer() and "." not in value else number
    return None


def to_plain(value: Any) -> Any:
    """A dataclass tree as plain YAML/JSON-safe values (tuples become lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value
