"""The judge's wire format: values as plain data, framed on a socket, decoded without pickle.

A message is one value: None, bool, numbers, str, bytes, the builtin containers, slices, paths, torch
dtypes and devices, tensors and NumPy arrays (dtype, shape, raw bytes), and `Ref`s to objects that
stay with their owner. Every container is a one-key JSON object, so nothing decodes to a type the
format does not name; the decoder checks sizes and depth before it builds anything. What a `Ref`
points at and who may call it are dojo.grading.judging.remote's.
"""

from __future__ import annotations

import collections
import functools
import json
import keyword
import math
import pathlib
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MAX_MESSAGE = 512 * 2**20  # bytes: a message past this is refused unread
MAX_DEPTH = 64  # nesting of containers
MAX_ITEMS = 2_000_000  # values in one message
_HEADER = struct.Struct(">QI")  # total length, JSON length

TORCH_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}
NUMPY_DTYPES = {
    "float64",
    "float32",
    "float16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
    "complex64",
    "complex128",
}


class WireError(ValueError):
    """A message that is not the format: too large, too deep, an unknown tag, a size that does not add up."""


@dataclass(frozen=True)
class Ref:
    """An object that stays with `owner` ("worker" or "judge"), known to the other side by `id`.
    `kind` says what it is, for messages: a type name, never anything the receiver acts on."""

    owner: str
    id: int
    kind: str = "object"


def encode(value: Any, export: Callable[[Any], Any]) -> tuple[str, list[bytes]]:
    """(JSON text, buffers) for `value`. `export(obj)` is asked for anything not plain data and returns
    a Ref (or a plain value) to send instead, or raises TypeError to refuse it."""
    buffers: list[bytes] = []

    def enc(v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
        t = type(v)
        if v is None or t in (bool, str):
            return v
        if t is int:
            return v
        if t is float:
            return v if math.isfinite(v) else {"f": repr(v)}
        if isinstance(v, torch.Tensor):
            return {"t": _tensor(v, buffers)}
        if isinstance(v, np.ndarray):
            return {"n": _array(v, buffers)}
        if isinstance(v, np.generic):
            return {"ns": _array(np.asarray(v), buffers)}
        if isinstance(v, (bytes, bytearray, memoryview)):
            buffers.append(bytes(v))
            return {"B": len(buffers) - 1}
        if isinstance(v, Ref):
            return {"R": [v.owner, v.id, v.kind]}
        if isinstance(v, torch.dtype):
            return {"dt": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            return {"dev": str(v)}
        if isinstance(v, pathlib.PurePath):
            return {"P": str(v)}
        if isinstance(v, bool):  # numpy bools are np.generic above; this is a bool subclass
            return bool(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return int(v)  # an int subclass (an IntEnum) goes as the int it is
        if isinstance(v, float):
            return enc(float(v), depth)
        if isinstance(v, complex):
            return {"C": [enc(float(v.real), depth), enc(float(v.imag), depth)]}
        if isinstance(v, slice):
            return {"sl": [enc(v.start, depth + 1), enc(v.stop, depth + 1), enc(v.step, depth + 1)]}
        if v is Ellipsis:
            return {"E": 0}
        if t is list or t is tuple or t is dict or t is set or t is frozenset or t is torch.Size:
            return _container(v, t, lambda x: enc(x, depth + 1))
        fields = getattr(t, "_fields", None) if isinstance(v, tuple) else None
        if isinstance(fields, tuple) and all(type(f) is str for f in fields) and len(fields) == len(v):
            # a namedtuple: its field names come along, its methods (and any __eq__) do not
            return {"NT": [t.__name__[:100], list(fields), [enc(x, depth + 1) for x in tuple.__iter__(v)]]}
        flat = plain(v)  # a container subclass (a namedtuple, a list with its own __eq__) as its plain type
        return enc(export(v) if flat is None else flat, depth)  # anything else: the exporter decides

    def _container(v, t, sub):
        if t is dict:
            return {"D": [[sub(k), sub(x)] for k, x in list(v.items())]}
        tag = {list: "L", tuple: "T", torch.Size: "T", set: "S", frozenset: "F"}[t]
        return {tag: [sub(x) for x in list(v)]}

    return json.dumps(enc(value, 0), allow_nan=False, separators=(",", ":")), buffers


def plain(value: Any) -> Any:
    """A container subclass as its plain type (a namedtuple as a tuple, an OrderedDict as a dict),
    or None when `value` is no container: what an exporter may send instead of a Ref."""
    for base in (dict, tuple, list, frozenset, set):
        if isinstance(value, base):
            return dict(value.items()) if base is dict else base(value)
    return None


def decode(text: str, buffers: list[bytes], resolve: Callable[[Ref], Any]) -> Any:
    """The value of a message, built only from the types this module names; `resolve(ref)` turns a
    Ref into what the receiver uses for it. Raises WireError for anything else."""
    try:
        tree = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not a message: {exc}") from None
    count = [0]

    def dec(v: Any, depth: int) -> Any:
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise WireError("a message too deep or too large to decode")
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is not dict or len(v) != 1:
            raise WireError(f"a bare {type(v).__name__} where a tagged value belongs")
        ((tag, x),) = v.items()
        if tag in ("L", "T", "S", "F"):
            items = [dec(i, depth + 1) for i in _list(x)]
            return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "D":
            return {dec(_pair(p)[0], depth + 1): dec(_pair(p)[1], depth + 1) for p in _list(x)}
        if tag == "NT":
            name, fields, values = _list(x)
            if (
                type(name) is not str
                or not _names(fields)
                or type(values) is not list
                or len(values) != len(fields)
            ):
                raise WireError("a malformed named tuple")
            return _named_tuple(name, tuple(fields))(*(dec(i, depth + 1) for i in values))
        if tag == "f":
            if x not in ("nan", "inf", "-inf"):
                raise WireError(f"not a float: {x!r}")
            return float(x)
        if tag == "B":
            return _buffer(buffers, x)
        if tag == "t":
            return _to_tensor(x, buffers)
        if tag in ("n", "ns"):
            array = _to_array(x, buffers)
            return array if tag == "n" else array[()]
        if tag == "R":
            owner, ident, kind = _list(x)
            if owner not in ("worker", "judge") or type(ident) is not int or type(kind) is not str:
                raise WireError("a malformed reference")
            return resolve(Ref(owner, ident, kind[:200]))
        if tag == "dt":
            if x not in TORCH_DTYPES:
                raise WireError(f"an unknown torch dtype {str(x)[:40]!r}")
            return TORCH_DTYPES[x]
        if tag == "dev":
            return torch.device(str(x)[:40])
        if tag == "P":
            if type(x) is not str or "\0" in x:
                raise WireError("a malformed path")
            return pathlib.Path(x)
        if tag == "C":
            re, im = (dec(i, depth + 1) for i in _list(x))
            return complex(float(re), float(im))
        if tag == "sl":
            return slice(*(dec(i, depth + 1) for i in _list(x)))
        if tag == "E":
            return Ellipsis
        raise WireError(f"an unknown tag {tag[:20]!r}")

    return dec(tree, 0)


@functools.lru_cache(maxsize=256)
def _named_tuple(name: str, fields: tuple[str, ...]) -> type:
    """A namedtuple class made here for a named tuple that came over the wire: plain tuple equality."""
    return collections.namedtuple(
        name if name.isidentifier() and not keyword.iskeyword(name) else "Record", fields
    )


def _names(fields) -> bool:
    return (
        type(fields) is list
        and len(fields) <= 256
        and len(set(fields)) == len(fields)
        and all(
            type(f) is str and f.isidentifier() and not keyword.iskeyword(f) and not f.startswith("_")
            for f in fields
        )
    )


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _list(x) -> list:
    if type(x) is not list:
        raise WireError("a malformed container")
    return x


def _pair(x) -> list:
    if type(x) is not list or len(x) != 2:
        raise WireError("a malformed dict entry")
    return x


def _buffer(buffers: list[bytes], index) -> bytes:
    if type(index) is not int or not 0 <= index < len(buffers):
        raise WireError("a reference to a buffer the message does not have")
    return buffers[index]


def _tensor(t: torch.Tensor, buffers: list[bytes]) -> dict:
    name = str(t.dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES or t.layout != torch.strided or t.is_quantized or t.device.type != "cpu":
        raise TypeError(
            f"a tensor of dtype {t.dtype}, layout {t.layout} on {t.device} cannot be sent: "
            "only plain CPU tensors of the common dtypes"
        )
    flat = torch.empty(t.numel(), dtype=t.dtype)  # a fresh dense copy: no view's strides come along
    flat.copy_(torch.Tensor.detach(t).reshape(-1))
    data = flat.view(torch.uint8) if flat.numel() and flat.dtype != torch.uint8 else flat
    buffers.append(data.numpy().tobytes() if flat.numel() else b"")
    return {"dtype": name, "shape": [int(s) for s in t.shape], "b": len(buffers) - 1}


def _to_tensor(x, buffers: list[bytes]) -> torch.Tensor:
    if type(x) is not dict or set(x) != {"dtype", "shape", "b"} or x["dtype"] not in TORCH_DTYPES:
        raise WireError("a malformed tensor")
    dtype, shape, data = TORCH_DTYPES[x["dtype"]], _shape(x["shape"]), _buffer(buffers, x["b"])
    numel = math.prod(shape)
    if numel * dtype.itemsize != len(data):
        raise WireError(f"a tensor of shape {tuple(shape)} and dtype {x['dtype']} with {len(data)} bytes")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def _array(a: np.ndarray, buffers: list[bytes]) -> dict:
    if a.dtype.name not in NUMPY_DTYPES:
        raise TypeError(f"a NumPy array of dtype {a.dtype} cannot be sent")
    buffers.append(np.ascontiguousarray(a).tobytes())
    return {"dtype": a.dtype.name, "shape": [int(s) for s in a.shape], "b": len(buffers) - 1}


def _to_array(x, buffers: list[bytes]) -> np.ndarray:
    if type(x) is not dict or set(x) != {"dtype", "shape", "b"} or x["dtype"] not in NUMPY_DTYPES:
        raise WireError("a malformed array")
    dtype, shape, data = np.dtype(x["dtype"]), _shape(x["shape"]), _buffer(buffers, x["b"])
    if math.prod(shape) * dtype.itemsize != len(data):
        raise WireError(f"an array of shape {tuple(shape)} and dtype {dtype} with {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _shape(shape) -> list[int]:
    if type(shape) is not list or len(shape) > 16 or any(type(s) is not int or s < 0 for s in shape):
        raise WireError("a malformed shape")
    if math.prod(shape) > MAX_MESSAGE:
        raise WireError(f"a shape {tuple(shape)} larger than any message")
    return shape


# ---- framing ---------------------------------------------------------------------------------------


def send(sock: socket.socket, text: str, buffers: list[bytes]) -> None:
    """One frame: total length and JSON length, the JSON, then each buffer after its 8-byte length."""
    body = text.encode()
    parts = [body]
    for b in buffers:
        parts += [struct.pack(">Q", len(b)), b]
    total = sum(map(len, parts))
    if total > MAX_MESSAGE:
        raise WireError(f"a message of {total / 2**20:.0f} MiB, over the {MAX_MESSAGE // 2**20} MiB limit")
    sock.sendall(_HEADER.pack(total, len(body)) + b"".join(parts))


def recv(sock: socket.socket) -> tuple[str, list[bytes]]:
    """One frame, checked against MAX_MESSAGE before it is read; EOFError when the peer has gone."""
    total, json_len = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if total > MAX_MESSAGE or json_len > total:
        raise WireError(f"a frame of {total} bytes: over the limit, or malformed")
    data = _exactly(sock, total)
    text, rest, buffers = data[:json_len], memoryview(data)[json_len:], []
    while len(rest):
        if len(rest) < 8:
            raise WireError("a frame whose buffers do not add up")
        (n,) = struct.unpack(">Q", rest[:8])
        if n > len(rest) - 8:
            raise WireError("a frame whose buffers do not add up")
        buffers.append(bytes(rest[8 : 8 + n]))
        rest = rest[8 + n :]
    try:
        return text.decode(), buffers
    except UnicodeDecodeError:
        raise WireError("a frame whose text is not UTF-8") from None


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
