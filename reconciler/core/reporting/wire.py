"""The shapes that cross a file or HTTP boundary, and their one serializer each (pure).

Each shape is a frozen pydantic model with camelCase aliases, like the input models of
:mod:`reconciler.core.compile.model`: the model says once which keys a record has, what each is
called on the wire and how its value is written. Two boundaries, one generic dump each:

- the status branch files (:class:`reconciler.core.reporting.status.StatusRecord`): fields without a
  value are left out;
- the JSON API and ``-o json`` (:class:`ApiModel.to_json`): every field, ``null`` when unset.

Both dump in Python mode and leave the text to their writer (the status files' canonical
JSON and YAML, the API's ``json.dumps``): free-form data (a workload's outputs, a compiled
spec) is handed over as it is held, so the writer treats it as it always did.

What must live here: the two base models and their dumps. The shapes themselves live beside
their meaning (``status.py``, ``views/queue_view.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    PlainSerializer,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from reconciler.core.quantity import format_quantity

T = TypeVar("T")


class WireModel(BaseModel):
    """A record written to a file or an HTTP response: frozen, camelCase on the wire,
    built in code by field name."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class ApiModel(WireModel):
    """A JSON object of the API (``/api/v1``, ``reconciler queues -o json``)."""

    def to_json(self) -> dict[str, Any]:
        """camelCase keys, every field; ``null`` for an unset one."""
        return self.model_dump(by_alias=True)


def _empty(value: object) -> bool:
    return not value


def _or_none(value: T) -> T | None:
    return value or None


def _as_held(_source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    return core_schema.any_schema()


def _plain(value: Mapping[str, Any]) -> Any:
    return dict(value)


# A sequence: held as a tuple, written as a list (a JSON array, as ``json.loads`` gives).
Items = Annotated[tuple[T, ...], PlainSerializer(list, return_type=list[Any])]
# Left out of the output when empty ("", 0, (), {}), not only when None.
OmitEmpty = Annotated[T, Field(exclude_if=_empty)]
# Written as null when empty ("" or 0): the API's "no value".
EmptyAsNull = Annotated[T, PlainSerializer(_or_none, return_type=Any)]
# A Kubernetes quantity, written as text (``500m``, ``2Gi``).
QuantityText = Annotated[Decimal, PlainSerializer(format_quantity, return_type=str)]
# A time, written as ISO 8601 with its offset (``datetime.isoformat``).
IsoTime = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str)]
# Free-form JSON data (outputs, a blocker, a compiled spec): kept as held, not validated
# (the type checker checks the code that builds it), written as a plain dict.
JsonObject = Annotated[
    Mapping[str, Any], GetPydanticSchema(_as_held), PlainSerializer(_plain, return_type=Any)
]
