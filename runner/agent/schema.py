"""A small JSON-schema check for tool arguments (the subset our tool schemas use)."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_args(schema: dict[str, Any], args: Any) -> str | None:
    """Return a message describing the first violation, or None when ``args`` fit ``schema``."""
    if not isinstance(args, dict):
        return "arguments must be a JSON object"
    props: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in args:
            return f"missing required argument {name!r}"
    if schema.get("additionalProperties") is False:
        extra = sorted(set(args) - set(props))
        if extra:
            return f"unknown argument(s) {', '.join(map(repr, extra))}; allowed: {', '.join(sorted(props))}"
    for name, value in args.items():
        spec = props.get(name)
        if not spec or "type" not in spec:
            continue
        kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        if value is None and "null" in kinds:
            continue
        ok = any(
            isinstance(value, _TYPES.get(k, (object,))) and not (k in ("integer", "number") and isinstance(value, bool))
            for k in kinds
        )
        if not ok:
            return f"argument {name!r} must be of type {'/'.join(kinds)}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {name!r} must be one of {spec['enum']}"
    return None
