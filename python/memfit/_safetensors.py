"""A small safetensors reader for a run's weights (model.safetensors).

Layout: 8-byte little-endian header length N, N bytes of JSON header
({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": ...}),
then the tensors' bytes, offsets relative to the end of the header. Every
size is checked against the file before its bytes are used. bf16 tensors are
widened to float32 (numpy has no bfloat16).
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
    "BF16": np.uint16,  # widened below
}


def read(path):
    """{name: numpy array} in the file's order."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: malformed header: {e}") from None
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: unknown dtype {dtype}")
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        item = np.dtype(_DTYPES[dtype]).itemsize
        if not (0 <= begin <= end <= len(body)) or end - begin != count * item:
            raise ValueError(f"{path}: tensor {name}: offsets {begin}..{end} do not hold {shape} of {dtype}")
        a = np.frombuffer(body[begin:end], dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"), count=count)
        if dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(shape).copy()
    return out
