"""Walking JSON values, and keeping text that cannot be encoded out of replies; pure.

JSON decoded by Python's `json` module may hold unpaired UTF-16 surrogates (`"\\ud800"` is valid
JSON text), which no UTF-8 encoder accepts: one such string in a reply makes its serialisation
fail. Everything that goes back to a client and holds model-written text is checked here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

__all__ = ["iter_strings", "map_strings", "scrub_unpaired_surrogates", "unpaired_surrogate_free"]

M = TypeVar("M", bound=BaseModel)


def iter_strings(value: Any, *, keys: bool = False) -> Iterator[str]:
    """Every string in a JSON value, depth first; object keys too when `keys`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            if keys:
                yield from item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A copy of a JSON value with `fn` applied to every string value (keys are left alone)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {key: map_strings(item, fn) for key, item in value.items()}
    if isinstance(value, list):
        return [map_strings(item, fn) for item in value]
    return value


def unpaired_surrogate_free(text: str) -> str:
    """`text` with every unpaired surrogate replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def scrub_unpaired_surrogates(model: M) -> M:
    """`model` itself when it serialises, else a copy with every unpaired surrogate replaced."""
    try:
        model.model_dump_json(by_alias=True)
    except PydanticSerializationError:
        data = map_strings(model.model_dump(by_alias=True), unpaired_surrogate_free)
        return type(model).model_validate(data)
    return model
