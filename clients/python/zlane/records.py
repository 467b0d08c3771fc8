"""Plain Python objects for the messages the broker sends, made from the schema's
descriptors (proto/zlane.proto) rather than written out by hand.

`to_record(msg)` turns a protobuf message into an instance of a class named like
its message type (DeadLetter, DlqAlert, BatchInfo, Stats, GroupStats, Attempt, ...), with one
attribute per field: scalars as Python values, enums by name ("OUTCOME_ACKED"),
nested messages as records, repeated fields as lists, and a repeated field of
key/value pairs (Header, Counter) as a dict.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from ._proto import pb


class Record:
    """Base class of the decoded messages: attributes named after the fields."""

    _fields: tuple[str, ...] = ()

    def __init__(self, **values):
        for name in self._fields:
            setattr(self, name, values.get(name))

    def as_dict(self) -> dict:
        """The record as nested dicts and lists."""
        def plain(v):
            if isinstance(v, Record):
                return v.as_dict()
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v
        return {name: plain(getattr(self, name)) for name in self._fields}

    def __eq__(self, other):
        return type(self) is type(other) and self.as_dict() == other.as_dict()

    def __repr__(self):
        shown = []
        for name in self._fields:
            v = getattr(self, name)
            if isinstance(v, bytes) and len(v) > 40:
                v = v[:40] + b"..."
            shown.append(f"{name}={v!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


_classes: dict[str, type] = {}


def record_class(descriptor) -> type:
    """The Record subclass for a message descriptor (made once, by name)."""
    cls = _classes.get(descriptor.full_name)
    if cls is None:
        cls = type(descriptor.name, (Record,), {
            "_fields": tuple(f.name for f in descriptor.fields),
            "__doc__": f"A decoded {descriptor.full_name} (fields: "
                       f"{', '.join(f.name for f in descriptor.fields)}).",
            "__module__": "zlane",
        })
        _classes[descriptor.full_name] = cls
    return cls


def _pair_fields(descriptor):
    names = [f.name for f in descriptor.fields]
    if len(names) == 2 and names[1] == "value" and names[0] in ("key", "name"):
        return names[0]
    return None


def _value(field, value):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_record(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type.values_by_number.get(value)
        return enum.name if enum else value
    return value


def to_record(msg):
    """The Record for protobuf message `msg` (see the module's docstring)."""
    descriptor = msg.DESCRIPTOR
    values = {}
    for field in descriptor.fields:
        value = getattr(msg, field.name)
        if field.label == FieldDescriptor.LABEL_REPEATED:
            key = _pair_fields(field.message_type) if field.message_type else None
            if key:
                values[field.name] = {getattr(item, key): item.value for item in value}
            else:
                values[field.name] = [_value(field, item) for item in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not msg.HasField(field.name):
            values[field.name] = None
        else:
            values[field.name] = _value(field, value)
    return record_class(descriptor)(**values)


BatchInfo = record_class(pb.BatchInfo.DESCRIPTOR)
DeadLetter = record_class(pb.DeadLetter.DESCRIPTOR)
DlqAlert = record_class(pb.DlqAlert.DESCRIPTOR)
Attempt = record_class(pb.Attempt.DESCRIPTOR)
Stats = record_class(pb.Stats.DESCRIPTOR)
GroupStats = record_class(pb.GroupStats.DESCRIPTOR)
Latency = record_class(pb.Latency.DESCRIPTOR)
