"""solutions.system.loading.gguf_file against the `gguf` package's own reader (the oracle), on SmolLM2 and on small
files the `gguf` writer makes with every value type, F16/Q8_0/Q4_1 tensors and an odd alignment."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from solutions.system.loading.gguf_file import GGUFFile
from solutions.system.loading.weights import open_gguf


def same_as_gguf(path) -> None:
    """Every field's contents and every tensor's name, type, shape, sizes, offset and bytes agree."""
    ours, want = GGUFFile(path), gguf.GGUFReader(path)
    fields = {k: f for k, f in want.fields.items() if not k.startswith("GGUF.")}  # its header, as fields
    assert list(ours.fields) == list(fields), "the fields, in file order"
    for key, field in fields.items():
        got, expected = ours.fields[key].contents(), field.contents()
        assert got == expected and type(got) is type(expected), (
            f"field {key}: {got!r:.80} against {expected!r:.80}"
        )
        assert ours.fields[key].types == tuple(field.types), f"field {key}'s types"
    assert [t.name for t in ours.tensors] == [t.name for t in want.tensors]
    for a, b in zip(ours.tensors, want.tensors):
        assert (a.tensor_type, a.shape, a.n_elements, a.n_bytes, a.data_offset) == (
            b.tensor_type,
            tuple(int(s) for s in b.shape),
            int(b.n_elements),
            int(b.n_bytes),
            int(b.data_offset),
        ), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, (
            f"{a.name}: {a.data.shape} {b.data.shape}"
        )
        assert np.array_equal(a.data.view(np.uint8), np.asarray(b.data).view(np.uint8)), f"{a.name}'s bytes"
        assert not a.data.flags.writeable, f"{a.name}: the mapped file must be read-only"


def test_smollm2_reads_as_gguf_reads_it(smollm2_path):
    """the shipped model: 36 fields (49,152 tokens, 48,900 merges), 272 tensors"""
    same_as_gguf(smollm2_path)


def write(path, alignment: int | None = None) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        writer.data_alignment = alignment
        writer.add_uint32("general.alignment", alignment)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -5)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -30000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 0.1)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "naïve — 你好")
    writer.add_uint64("t.u64", 2**63 + 1)
    writer.add_int64("t.i64", -(2**62))
    writer.add_float64("t.f64", 1 / 3)
    writer.add_array("t.strings", ["", "a b", "Ġt", "<|im_end|>"])
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, -1.25])
    writer.add_array("t.empty", [])
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("f16", rng.standard_normal((2, 7)).astype(np.float16))
    w = rng.standard_normal((4, 64)).astype(np.float32)
    for kind in (Q.Q8_0, Q.Q4_1):
        writer.add_tensor(kind.name.lower(), gguf.quants.quantize(w, kind), raw_dtype=kind)
    writer.add_tensor("vector", rng.standard_normal(9).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("alignment", [None, 64])
def test_every_value_type_and_tensor_kind(tmp_path, alignment):
    """each metadata value type, string/int/float/empty arrays, F32/F16/Q8_0/Q4_1 tensors, a 1-D
    tensor, the default and a set alignment"""
    write(tmp_path / "all.gguf", alignment)
    same_as_gguf(tmp_path / "all.gguf")


def test_bad_files_are_clear_errors(tmp_path):
    """not GGUF, an unknown version, an unknown value type, a file cut inside its metadata, a string
    longer than the file, an alignment that is not a power of two: ValueErrors that name the file and
    the problem"""
    write(tmp_path / "good.gguf")
    data = (tmp_path / "good.gguf").read_bytes()
    cases = {
        "not a GGUF file": b"PK\x03\x04" + data[4:],
        "version 9": data[:4] + (9).to_bytes(4, "little") + data[8:],
        "ends inside its metadata": data[:200],
        "unknown metadata value type 77": data[: data.index(b"t.u8") + 4]
        + (77).to_bytes(4, "little")
        + data[data.index(b"t.u8") + 8 :],
        "runs past the end": data[: data.index(b"t.str") + 9]
        + (2**40).to_bytes(8, "little")
        + data[data.index(b"t.str") + 17 :],
    }
    aligned = tmp_path / "aligned.gguf"
    write(aligned, 64)
    at = (
        aligned.read_bytes().index(b"general.alignment") + len("general.alignment") + 4
    )  # past the value type
    cases["not a power of two"] = (
        aligned.read_bytes()[:at] + (48).to_bytes(4, "little") + aligned.read_bytes()[at + 4 :]
    )
    for why, content in cases.items():
        path = tmp_path / "bad.gguf"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=why):
            GGUFFile(path)
    last = GGUFFile(tmp_path / "good.gguf").tensors[-1]
    path.write_bytes(
        data[: last.data_offset + last.n_bytes - 1]
    )  # the tensor data cut short: open_gguf says so
    with pytest.raises(ValueError, match="truncated: its tensors need"):
        open_gguf(path)
