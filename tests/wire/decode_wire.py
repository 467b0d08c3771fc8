#!/usr/bin/python3
"""Decode every frame the broker sent in the integration tests with a proto3
decoder other than protobuf-c: Debian's python3-protobuf, on code that protoc
generated from proto/zlane.proto.

The integration tests run each broker with `--set wire_dump=FILE`: every frame
it sends, each as a 4-byte little-endian length and the Envelope. A frame that
does not decode (invalid UTF-8 in a string field, say, which proto3 decoders
refuse) or holds a string with a NUL byte fails the test, naming the file, the
frame's offset and the body kind.

usage: decode_wire.py PROTO_PY_DIR DUMP_DIR
"""
import collections
import glob
import os
import sys


def strings_with_nul(msg, path=""):
    """Yield the path of every string field of `msg` that holds a NUL."""
    for field, value in msg.ListFields():
        name = f"{path}.{field.name}" if path else field.name
        values = value if field.label == field.LABEL_REPEATED else [value]
        for i, v in enumerate(values):
            where = f"{name}[{i}]" if field.label == field.LABEL_REPEATED else name
            if field.type == field.TYPE_MESSAGE:
                yield from strings_with_nul(v, where)
            elif field.type == field.TYPE_STRING and "\0" in v:
                yield where


def frames(path):
    """Yield (offset, frame) for each whole record of a dump; a broker killed
    mid-write leaves a last record cut short, which is skipped."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos:pos + 4], "little")
        if pos + 4 + size > len(data):
            return
        yield pos, data[pos + 4:pos + 4 + size]
        pos += 4 + size


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    sys.path.insert(0, sys.argv[1])
    import zlane_pb2  # generated at build time
    from google.protobuf.internal import api_implementation
    from google.protobuf.message import DecodeError

    files = sorted(glob.glob(os.path.join(sys.argv[2], "*.wire")))
    kinds = collections.Counter()
    bad = []
    for path in files:
        for offset, frame in frames(path):
            env = zlane_pb2.Envelope()
            try:
                env.ParseFromString(frame)
            except DecodeError as e:
                bad.append(f"{os.path.basename(path)}@{offset}: does not decode: {e}")
                continue
            kind = env.WhichOneof("body") or "none"
            kinds[kind] += 1
            if env.version != 1:
                bad.append(f"{os.path.basename(path)}@{offset}: {kind}: version {env.version}")
            for where in strings_with_nul(env):
                bad.append(f"{os.path.basename(path)}@{offset}: {kind}: {where} holds NUL")
    total = sum(kinds.values())
    print(f"python3-protobuf {api_implementation.Type()}: {total} frames from "
          f"{len(files)} brokers: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for line in bad[:50]:
        print("FAIL", line)
    if bad:
        print(f"{len(bad)} frame(s) a proto3 decoder refuses")
        return 1
    if total == 0:
        print("FAIL: no frames: the integration tests wrote no wire dump")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
