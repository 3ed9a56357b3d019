"""The start-up cache (solutions.system.loading.weights_cache): valid files are used, changed or damaged ones rebuilt.

The bookkeeping is checked on a small stand-in "GGUF" (any file: the cache only hashes it); the
whole path, GGUF to memory-mapped model, on a copy of the real file in pytest's tmp_path, never
in the real workspace. Oracle: the model built straight from the GGUF (solutions.system.loading.weights).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from solutions.system.kernels import calibration
from solutions.system.loading import weights_cache
from solutions.system.loading.weights_cache import Cache


@pytest.fixture
def fake(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(os.urandom(1 << 16))
    return gguf, tmp_path / "cache"


def stored(gguf, cache_dir, said):
    cache = Cache(cache_dir, gguf, said.append)
    cache.store("weights-x.bin", lambda p: p.write_bytes(b"w" * 4096))
    return cache


def test_a_stored_file_is_valid_until_damaged(fake):
    """A stored file passes its check; truncated or with one byte flipped it fails, saying why."""
    gguf, cache_dir = fake
    said: list[str] = []
    path = stored(gguf, cache_dir, said).valid("weights-x.bin")
    assert path is not None and said == []
    path.write_bytes(b"w" * 1000)
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") is None
    assert "damaged" in said[-1] and "1,000 bytes" in said[-1], said
    path.write_bytes(b"w" * 2000 + b"x" + b"w" * 2095)
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") is None
    assert "CRC-32" in said[-1], said


def test_the_crc_is_taken_only_when_the_mtime_moved(fake, monkeypatch):
    """A file whose mtime is the one recorded is not read; the same content with a new mtime passes
    its CRC-32 once and its mtime is recorded."""
    import solutions.system.loading.weights_cache as wc

    gguf, cache_dir = fake
    said: list[str] = []
    path = stored(gguf, cache_dir, said).valid("weights-x.bin")
    digests, real = [], wc.file_digest
    monkeypatch.setattr(wc, "file_digest", lambda p, algorithm: digests.append(p.name) or real(p, algorithm))
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") == path and digests == []
    os.utime(path, ns=(10**18, 10**18))  # touched: same bytes
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") == path and digests == ["weights-x.bin"]
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") == path and digests == ["weights-x.bin"]
    assert said == []


def test_a_changed_gguf_drops_every_file(fake):
    """New GGUF content (new size or mtime, new hash) empties the cache and says what changed."""
    gguf, cache_dir = fake
    said: list[str] = []
    stored(gguf, cache_dir, said)
    gguf.write_bytes(os.urandom(1 << 16))
    os.utime(gguf, ns=(1, 1))
    cache = Cache(cache_dir, gguf, said.append)
    assert cache.valid("weights-x.bin") is None
    assert "GGUF changed" in said[-1] and "blake2b" in said[-1], said


def test_a_touched_gguf_with_the_same_content_keeps_the_cache(fake):
    """A new mtime with the same bytes (a re-install) re-hashes, finds the same key, keeps the files."""
    gguf, cache_dir = fake
    said: list[str] = []
    stored(gguf, cache_dir, said)
    os.utime(gguf, ns=(10**18, 10**18))
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") is not None and said == []
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    assert manifest["gguf"]["mtime_ns"] == 10**18, "the new mtime is recorded"


def test_a_changed_key_or_damaged_manifest_rebuilds(fake):
    """A manifest whose recorded hash differs, or that is not JSON, rebuilds with a message."""
    gguf, cache_dir = fake
    said: list[str] = []
    stored(gguf, cache_dir, said)
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    manifest["gguf"]["blake2b"] = "0" * 128
    manifest["gguf"]["size"] += 1
    (cache_dir / "manifest.json").write_text(json.dumps(manifest))
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") is None
    assert "GGUF changed" in said[-1], said
    stored(gguf, cache_dir, said)
    (cache_dir / "manifest.json").write_text("{half a manifest")
    assert Cache(cache_dir, gguf, said.append).valid("weights-x.bin") is None
    assert "manifest" in said[-1] and "damaged" in said[-1], said


@pytest.fixture(scope="module")
def gguf_copy(tmp_path_factory, smollm2_path):
    path = tmp_path_factory.mktemp("gguf") / smollm2_path.name
    path.write_bytes(smollm2_path.read_bytes())
    return path


@pytest.fixture(scope="module")
def cold_int4(tmp_path_factory, gguf_copy):
    """One cold int4 start (it builds the tokenizer and weights files: seconds) and its cache folder, which
    each test copies before it changes anything."""
    folder = tmp_path_factory.mktemp("cold-int4")
    return folder, weights_cache.load("int4", folder, gguf_copy)


def logits(model, tokenizer) -> torch.Tensor:
    ids = torch.tensor([tokenizer.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n")])
    with torch.inference_mode():
        return model(ids)[0, -1]


def test_first_start_builds_later_starts_map(gguf_copy, cold_int4, tmp_path):
    """The first load builds the tokenizer and int4 files and says so; the second is silent, maps
    the same tensors (no GGUF parse) and gives the same logits; a damaged weights file is rebuilt."""
    built, cold = cold_int4
    folder = tmp_path / "cache"
    shutil.copytree(built, folder)
    assert any("cached the tokenizer" in n for n in cold.notes) and any(
        "int4 weights" in n for n in cold.notes
    )
    warm = weights_cache.load("int4", folder, gguf_copy)
    assert warm.notes == [] and "parse GGUF" not in warm.seconds, warm
    want = logits(cold.model, cold.tokenizer)
    assert torch.equal(logits(warm.model, warm.tokenizer), want)
    with open(folder / "weights-int4.safetensors", "r+b") as f:
        f.seek(50_000_000)
        f.write(b"\xff" * 64)
    fixed = weights_cache.load("int4", folder, gguf_copy)
    assert any("damaged" in n for n in fixed.notes), fixed.notes
    assert torch.equal(logits(fixed.model, fixed.tokenizer), want)


def test_a_truncated_tokenizer_file_is_rebuilt(gguf_copy, cold_int4, tmp_path):
    """A cut tokenizer.json fails its check and is rebuilt from the GGUF, encoding as before."""
    built, first = cold_int4
    folder = tmp_path / "cache"
    shutil.copytree(built, folder)
    path = folder / "tokenizer.json"
    path.write_bytes(path.read_bytes()[:1000])
    again = weights_cache.load("int4", folder, gguf_copy)
    assert any("tokenizer.json" in n and "damaged" in n for n in again.notes), again.notes
    text = "Hello, 12345 wörld <|im_end|>"
    assert again.tokenizer.encode(text) == first.tokenizer.encode(text)


def test_a_tokenizer_passed_in_is_kept_not_read(gguf_copy, cold_int4, tmp_path):
    """A speculative pair's second load keeps the first's tokenizer: the very object comes back, and
    tokenizer.json is not read (cut short, it would be found damaged and rebuilt from the GGUF)."""
    built, first = cold_int4
    folder = tmp_path / "cache"
    shutil.copytree(built, folder)
    path = folder / "tokenizer.json"
    path.write_bytes(path.read_bytes()[:1000])
    again = weights_cache.load("int4", folder, gguf_copy, tokenizer=first.tokenizer)
    assert again.tokenizer is first.tokenizer, "the tokenizer passed in should be the one returned"
    assert again.notes == [] and "parse GGUF" not in again.seconds, (again.notes, again.seconds)


def test_fp32_from_the_cache_is_the_reference_model(gguf_copy, tmp_path, smollm2, smollm2_tokenizer):
    """fp32 through the cache, in the layout the calibration picks (column-major here, by an
    injected timer, with 4-row products packed), has the reference model's logits; the calibration is noted."""
    col_wins = {
        ("row", 1): 2.0,
        ("row", 4): 4.0,
        ("col", 1): 2.0,
        ("col", 4): 3.0,
        ("packed", 1): 2.5,
        ("packed", 4): 2.0,
    }
    loaded = weights_cache.load("fp32", tmp_path, gguf_copy, calibration_timer=lambda *pair: col_wins[pair])
    assert loaded.calibration.layout == "col"
    if "packed" in calibration.kinds():  # torch with MKL
        assert loaded.model.layers[0].wqkv.packs == {4: None}, "4-row products not marked for packing"
    assert loaded.model.layers[0].wqkv.t().is_contiguous(), "column-major as calibrated"
    assert (tmp_path / "weights-fp32-col.safetensors").exists()
    diff = (logits(loaded.model, smollm2_tokenizer) - logits(smollm2, smollm2_tokenizer)).abs().max()
    assert diff < 1e-4, f"fp32 from the cache differs from the reference by {diff:.2e}"


def test_an_unknown_mode_fails_before_any_work(tmp_path, gguf_copy):
    """A bad mode is a ValueError naming the choices; nothing is written."""
    with pytest.raises(ValueError, match="fp32, bf16, int4"):
        weights_cache.load("int2", tmp_path / "c", gguf_copy)
    assert not (tmp_path / "c").exists()
