#!/usr/bin/env python3
"""Writes the GGUF fuzz seed corpus (fuzz/corpus/gguf/): small valid files that exercise every
metadata value type, nested and string arrays, alignment, split keys and quantised tensors."""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "gguf")
os.makedirs(out, exist_ok=True)


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
    if t == 8:
        return s(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    return struct.pack(fmt[t], v)


def gguf(kvs, tensors, align=32, version=3):
    h = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        h += s(k) + struct.pack("<I", t) + val(t, v)
    data = b""
    infos = b""
    for name, typ, shape, payload in tensors:
        while len(data) % align:
            data += b"\0"
        infos += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        infos += struct.pack("<IQ", typ, len(data))
        data += payload
    h += infos
    while len(h) % align:
        h += b"\0"
    return h + data


def write(name, blob):
    with open(os.path.join(out, name), "wb") as f:
        f.write(blob)


write("minimal.gguf", gguf([("general.architecture", 8, "qwen3moe")], [("t", 0, [8], struct.pack("<8f", *range(8)))]))
write("types.gguf", gguf([
    ("u8", 0, 7), ("i8", 1, -7), ("u16", 2, 700), ("i16", 3, -700), ("u32", 4, 70000), ("i32", 5, -70000),
    ("f32", 6, 1.5), ("bool", 7, 1), ("str", 8, "hello"), ("u64", 10, 1 << 40), ("i64", 11, -(1 << 40)),
    ("f64", 12, 2.5), ("strs", 9, (8, ["a", "bb", "Ġ Ġ"])), ("ints", 9, (5, [1, -2, 3])),
    ("nested", 9, (9, [(5, [1, 2]), (8, ["x"])])), ("floats", 9, (6, [0.5, 1.0])),
], [("a", 1, [4, 2], b"\x00\x3c" * 8), ("b", 30, [4], b"\x80\x3f" * 4)]))
write("aligned64.gguf", gguf([("general.alignment", 4, 64)],
                             [("q8", 8, [32, 2], (b"\x00\x3c" + bytes(range(32))) * 2), ("f", 0, [3], b"\0" * 12)], align=64))
write("split.gguf", gguf([("split.no", 2, 0), ("split.count", 2, 1), ("split.tensors.count", 5, 1)],
                         [("q4k", 12, [256], b"\x00\x3c\x00\x38" + bytes(range(140)))]))
write("v2.gguf", gguf([("general.name", 8, "v2")], [("t", 0, [1], b"\0\0\0\0")], version=2))
write("empty.gguf", gguf([], []))
