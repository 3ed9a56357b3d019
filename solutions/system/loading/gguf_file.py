"""A GGUF file's metadata and tensor table, read in one pass (what solutions.system.loading.weights.open_gguf returns).

It walks the file with `struct` over an mmap and keeps plain Python values, where `gguf.GGUFReader`
builds a numpy view for every part of every metadata value, slow on SmolLM2's vocabulary. It answers
the part of GGUFReader's interface the loader and the tests use: `fields[key].contents()` and
`tensors` (name, type, ggml-order shape, sizes, offset, and `data`, a read-only mapped numpy view).
The `gguf` package still supplies the constants. Not here: big-endian files, GGUF v1, writing.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

V = GGUFValueType
# struct's format for each scalar value type; numpy reads the same codes (np.dtype("<H") is uint16)
SCALARS = {
    V.UINT8: "<B",
    V.INT8: "<b",
    V.UINT16: "<H",
    V.INT16: "<h",
    V.UINT32: "<I",
    V.INT32: "<i",
    V.FLOAT32: "<f",
    V.BOOL: "<?",
    V.UINT64: "<Q",
    V.INT64: "<q",
    V.FLOAT64: "<d",
}
Q = GGMLQuantizationType
PLAIN = {
    Q.F32: np.float32,
    Q.F16: np.float16,
    Q.F64: np.float64,
    Q.I8: np.int8,
    Q.I16: np.int16,
    Q.I32: np.int32,
    Q.I64: np.int64,
}  # held as their dtype; any other type as bytes


@dataclass(frozen=True)
class Field:
    """One metadata entry: its key, GGUF value type (for an array, ARRAY then the element type)."""

    name: str
    types: tuple[GGUFValueType, ...]
    value: object

    def contents(self):
        return self.value


@dataclass(frozen=True)
class Tensor:
    """One entry of the tensor table, with its data mapped."""

    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]  # ggml order: the fastest-moving dimension first
    n_elements: int
    n_bytes: int
    data_offset: int  # from the start of the file
    data: np.ndarray


class GGUFFile:
    """A GGUF file, parsed. Raises ValueError naming the problem for a file that is not GGUF, has an
    unknown version or type, or ends inside its metadata or tensor table (truncated data is the
    caller's check: solutions.system.loading.weights.open_gguf compares the table's end with the file's size)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.path.stat().st_size else b""
        self._pos = 0
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{self.path} ends inside its metadata or tensor table, or they are garbled "
                f"(at byte {self._pos:,}): {exc}"
            ) from None

    def _parse(self) -> None:
        if bytes(self._map[:4]) != b"GGUF":
            raise ValueError(f"{self.path} is not a GGUF file (it starts with {bytes(self._map[:4])!r})")
        self._pos = 4
        version, n_tensors, n_fields = self._read("<I"), self._read("<Q"), self._read("<Q")
        if version not in (2, 3):
            raise ValueError(f"{self.path} is GGUF version {version}; this reader knows versions 2 and 3")
        self.fields: dict[str, Field] = {}
        for _ in range(n_fields):
            key = self._string()
            kind = self._type(self._read("<I"))
            if kind == V.ARRAY:
                item = self._type(self._read("<I"))
                self.fields[key] = Field(key, (kind, item), self._array(item, self._read("<Q")))
            else:
                self.fields[key] = Field(key, (kind,), self._value(kind))
        table = [
            (
                self._string(),
                [self._read("<Q") for _ in range(self._read("<I"))],
                self._read("<I"),
                self._read("<Q"),
            )
            for _ in range(n_tensors)
        ]
        align = self.fields["general.alignment"].value if "general.alignment" in self.fields else 32
        if type(align) is not int or align <= 0 or align & (align - 1):
            raise ValueError(f"{self.path}: general.alignment is {align!r}, not a power of two")
        start = -(-self._pos // align) * align
        whole = np.frombuffer(self._map, dtype=np.uint8) if len(self._map) else np.empty(0, np.uint8)
        self.tensors = [
            self._tensor(name, dims, kind, start + offset, whole) for name, dims, kind, offset in table
        ]

    def _read(self, fmt: str):
        value = struct.unpack_from(fmt, self._map, self._pos)[0]
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._read("<Q")
        end = self._pos + n
        if end > len(self._map):
            raise IndexError(f"a string of {n:,} bytes runs past the end")
        text = bytes(self._map[self._pos : end]).decode("utf-8")
        self._pos = end
        return text

    def _type(self, code: int) -> GGUFValueType:
        try:
            return V(code)
        except ValueError:
            raise ValueError(
                f"{self.path}: unknown metadata value type {code} at byte {self._pos - 4:,}"
            ) from None

    def _value(self, kind: GGUFValueType):
        if kind == V.STRING:
            return self._string()
        if kind == V.ARRAY:
            raise ValueError(f"{self.path}: an array inside an array at byte {self._pos:,} (not supported)")
        return self._read(SCALARS[kind])

    def _array(self, item: GGUFValueType, count: int) -> list:
        if item == V.STRING:
            return [self._string() for _ in range(count)]
        if item == V.ARRAY:
            raise ValueError(f"{self.path}: an array of arrays at byte {self._pos:,} (not supported)")
        dtype = np.dtype(SCALARS[item])  # numpy reads struct's codes
        end = self._pos + count * dtype.itemsize
        if end > len(self._map):
            raise IndexError(f"an array of {count:,} values runs past the end")
        values = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).tolist()
        self._pos = end
        return values

    def _tensor(self, name: str, dims: list[int], code: int, offset: int, whole: np.ndarray) -> Tensor:
        try:
            kind = Q(code)
            block, size = GGML_QUANT_SIZES[kind]
        except (ValueError, KeyError):
            raise ValueError(f"{self.path}: tensor {name} has unknown type {code}") from None
        n_elements = math.prod(dims)  # Python ints: garbled dims read as truncated, never as an overflow
        if dims and dims[0] % block:
            raise ValueError(
                f"{self.path}: tensor {name}'s rows of {dims[0]} are not whole {kind.name} blocks"
            )
        n_bytes = n_elements // block * size
        shape = tuple(reversed(dims))  # numpy order
        if offset + n_bytes > len(whole):  # truncated: an empty view; open_gguf names the shortfall
            data = whole[:0]
        elif kind in PLAIN:
            data = whole[offset : offset + n_bytes].view(PLAIN[kind]).reshape(shape)
        else:
            data = whole[offset : offset + n_bytes].reshape(*shape[:-1], shape[-1] // block * size)
        return Tensor(name, kind, tuple(dims), n_elements, n_bytes, offset, data)
