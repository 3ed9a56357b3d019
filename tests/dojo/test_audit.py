"""The audit hook (dojo.grading.confine.audit): every reference, imported and run as if it were the candidate's
file, works and gets no finding, library internals included (torch's import, dataclasses' exec); each
hostile request the candidate's own code makes is refused and recorded with its line.

A hook cannot be removed, so each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from dojo import catalog

ROOT = Path(__file__).resolve().parents[2]


def run(script: str) -> dict:
    """Run `script` in a fresh interpreter at the repository root; the JSON its last line prints."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


REFERENCES = """
    import importlib.util, json, sys
    from dojo.grading.confine import audit
    from dojo import catalog
    from dojo.grading import view
    slugs = SLUGS
    files = {f"solutions/{s}.py": s for s in slugs}
    allowed = {f"solutions.{m}" for s in slugs for m in view.allowed(catalog.get(s)) | set(view.reference_modules(catalog.get(s)))}
    found = []
    audit.install({str(__import__("pathlib").Path(f).resolve()) for f in files}, found.append, allowed=allowed)
    mods = {}
    for path, slug in files.items():
        spec = importlib.util.spec_from_file_location(f"candidate_{slug}", path)
        mods[slug] = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[slug])
    import numpy as np, torch
    from solutions.model import LlamaConfig, tiny_model
    m = mods
    t = m["bpe"].BPETokenizer(); t.train("hello hello world wide web " * 30, max_merges=20)
    assert t.decode(t.encode("hello web")) == "hello web"
    q = torch.randn(1, 2, 5, 8)
    assert m["attention"].attention(q, q, q, causal=True).shape == q.shape
    assert m["attention"].MultiHeadAttention(16, 4, 2)(torch.randn(1, 3, 16), causal=True).shape == (1, 3, 16)
    cache = m["kv_cache"].KVCache(2, 1, 2, 4, 8)
    cache.update(0, torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    model = tiny_model(0)
    out = m["generate"].generate(model, [[1, 2, 3]], max_new_tokens=3)
    out = m["generate"].generate(model, [[1, 2, 3]], max_new_tokens=3, strategy="beam", num_beams=2)
    config = LlamaConfig()
    assert m["roofline"].bound(m["roofline"].ridge_point(1e12, 1e11) * 2, 1e12, 1e11)
    m["roofline"].phase_cost(config, "decode", context_len=16)
    m["latency"].predict_ttft(config, 16, 1e12, 1e11)
    m["batching"].weight_bytes(config)
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    m["int4"].dequantize_q4_1(m["int4"].quantize_q4_1(w), w.shape)
    scaler = m["mixed_precision"].DynamicLossScaler()
    scaler.scale_loss(torch.tensor(1.0))
    paged = m["paged_kv"].PagedKVCache(2, 2, 16, num_blocks=4, block_size=2)
    paged.add_sequence(0)
    model.prefill(torch.tensor([[1, 2, 3]]), paged.view([0]))
    paged.fork(0, 1)
    view = paged.view([0, 1])
    model.decode_step(torch.tensor([4, 5]), view, view.attention_mask(1))
    for temperature in (0.0, 1.0):
        m["speculative"].speculative_generate(model, tiny_model(1), [1, 2, 3], max_new_tokens=5, k=2,
                                              temperature=temperature, seed=0)
    m["speculative"].expected_speedup(0.8, 4, 0.1)
    sched = m["scheduler"].Scheduler(m["scheduler"].SchedulerConfig(4, 4, 2))
    sched.add("a", [1, 2, 3], 2, 0.0)
    sched.step()
    assert sched.complete({"a": 5}, 1.0) == []
    out, lse = m["flash_attention"].flash_attention(q, q, q, causal=True, block_q=2, block_k=3, return_lse=True)
    m["flash_attention"].merge_partials([(out, lse), (out, lse)])
    m["flash_attention"].flash_decode(q[:, :, :1], q, q, splits=2)
    db = m["decoder_block"]
    x = torch.randn(1, 2, 3, 8)
    db.rms_norm(x, torch.ones(8), 1e-5)
    db.rope(x, torch.arange(3), 10000.0)
    db.attention(x, x[:, :1], x[:, :1])
    db.swiglu(torch.randn(3, 8), torch.randn(16, 8), torch.randn(16, 8), torch.randn(8, 16))
    sp = m["sampling"]
    chain = sp.make_chain(temperature=0.7, top_p=0.9, min_p=0.1, repetition_penalty=1.2)
    sp.sample(chain, [[1]], [[2]], torch.randn(1, 8), torch.Generator().manual_seed(0), top_logprobs=2)
    stop = sp.StopChecker([b"a", b"b", b"c"], ["bc"])
    stop.feed(0), stop.feed(1), stop.finish()
    pc = m["prefix_cache"].PrefixCache(4, 2)
    pc.add(0, [1, 2, 3])
    pc.free(0)
    assert pc.add(1, [1, 2, 4]) == 2
    print(json.dumps({"found": found}))
"""


def test_every_reference_as_the_candidate_gets_no_finding_and_works():
    """every reference, imported and called with the hook watching their files: no refusal, no finding"""
    slugs = [k.slug for k in catalog.load() if k.has_suite]
    assert all(f'm["{s}"]' in REFERENCES for s in slugs), "REFERENCES must call every kata's reference"
    result = run(REFERENCES.replace("SLUGS", repr(slugs)))
    assert result["found"] == []


HOSTILE = """
import dataclasses, gc, inspect, json, logging, os, subprocess, sys, typing, warnings
from collections import namedtuple

@dataclasses.dataclass
class Mine:
    x: int = 1

Pair = namedtuple("Pair", "a b")

def honest():
    warnings.warn("fine"); logging.getLogger("x").warning("fine")
    Mine.__name__ = "Mine2"  # its own class
    return Mine(2), Pair(1, 2), typing.get_type_hints(Mine)

CHEATS = {
    "exec": lambda: exec("x = 1"),
    "compile": lambda: compile("1", "s", "eval"),
    "sys._getframe": lambda: sys._getframe(1),
    "inspect.stack": lambda: inspect.stack(),
    "traceback frame": lambda: _tb_frame(),
    "__code__": lambda: honest.__code__,
    "gc.get_referrers": lambda: gc.get_referrers(honest),
    "os.system": lambda: os.system("true"),
    "subprocess": lambda: subprocess.run(["true"]),
    "ctypes": lambda: __import__("ctypes").CDLL(None),
    "import pluggy": lambda: __import__("pluggy"),
    "import a project module": lambda: __import__("tests.katas"),
    "a library's class renamed": lambda: setattr(json.JSONDecoder, "__name__", "X"),
    "another hook": lambda: sys.addaudithook(lambda *a: None),
}

def _tb_frame():
    try:
        1 / 0
    except ZeroDivisionError as e:
        return e.__traceback__.tb_frame
"""

HOSTILE_RUN = """
    import importlib.util, json, sys
    from dojo.grading.confine import audit
    found = []
    audit.install({PATH}, found.append)
    spec = importlib.util.spec_from_file_location("cheat", PATH)
    mod = sys.modules["cheat"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    mod.honest()
    honest = len(found)
    refused = {}
    for name, fn in mod.CHEATS.items():
        before = len(found)
        try:
            fn()
            refused[name] = False
        except audit.Refused:
            refused[name] = True
        except RuntimeError:
            refused[name] = True
        refused[name] = [refused[name], found[before:]]
    print(json.dumps({"honest": honest, "refused": refused}))
"""


def test_hostile_requests_are_refused_with_their_line(tmp_path):
    """each request from the candidate's own code is recorded with its line and refused; its dataclass,
    namedtuple, warnings, logging and typing (which exec and read frames themselves) are not"""
    path = tmp_path / "cheat.py"
    path.write_text(HOSTILE)
    result = run(HOSTILE_RUN.replace("PATH", repr(str(path))))
    assert result["honest"] == 0
    lines = HOSTILE.splitlines()
    for name, (refused, found) in result["refused"].items():
        assert found and found[0]["file"] == "cheat.py", (name, found)
        marker = "tb_frame" if name == "traceback frame" else f'"{name}":'
        assert marker in lines[found[0]["line"] - 1], (name, found)
        # sys.addaudithook swallows a hook's RuntimeError: the new hook is not added, and nothing is raised
        assert refused == (name != "another hook"), (name, refused)


LAUNDERED = """
import atexit, code, doctest, functools, json, pdb, runpy, sys, threading, timeit, typing, warnings, weakref
from concurrent.futures import ThreadPoolExecutor

TEMPLATE = "def inner(_it, _timer{init}):\\n    import sys; sys._getframe(0)\\n    return 0.0\\n"

class Hinted:
    x: "list[int]"
    y: "__import__('sys')._getframe(0)"

def fine():
    return 1

def doc():
    '''
    >>> x = 1
    '''

def honest():
    timeit.timeit(fine, number=2)
    typing.get_type_hints(fine)
    warnings.warn("fine")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(warnings.warn, "fine").result()
    threading.Thread(target=json.dumps, args=([1],)).start()
    functools.wraps(json.dumps)(fine)

def joined(thread):
    thread.start()
    thread.join()

LAUNDERED = {
    "timeit stmt": lambda: timeit.timeit(stmt="import sys; sys._getframe(0)", number=1),
    "timeit setup": lambda: timeit.Timer(fine, setup="x = 1"),
    "timeit template": lambda: (setattr(timeit, "template", TEMPLATE), timeit.timeit(fine, number=1)),
    "code": lambda: code.InteractiveInterpreter().runsource("x = 1"),
    "runpy": lambda: runpy.run_path(__file__.replace("cheat.py", "other.py")),
    "doctest": lambda: doctest.run_docstring_examples(doc, {}),
    "pdb": lambda: pdb.run("x = 1"),
    "typing": lambda: typing.get_type_hints(Hinted),
    "update_wrapper": lambda: functools.update_wrapper(json.JSONDecoder, fine, assigned=("decode",)),
    "wraps": lambda: functools.wraps(fine)(json.JSONEncoder),
    "a library function's code": lambda: functools.update_wrapper(json.dumps, fine, ("__code__",), ()),
    "thread exec": lambda: joined(threading.Thread(target=exec, args=("x = 1",))),
    "thread frames": lambda: joined(threading.Thread(target=sys._getframe)),
    "thread of a thread": lambda: joined(threading.Thread(target=joined, args=(threading.Thread(target=sys._getframe),))),
    "pool": lambda: ThreadPoolExecutor(1).submit(sys._getframe).exception(),
    "finalizer": lambda: weakref.finalize(Hinted(), exec, "x = 1"),
    "exit callback": lambda: atexit.register(exec, "x = 1"),
}
"""

LAUNDERED_RUN = """
    import atexit, importlib.util, json, sys, threading
    from dojo.grading.confine import audit
    found, routes = [], {}
    atexit.register(lambda: print(json.dumps({"honest": honest, "routes": routes, "at exit": found[n:]})))
    audit.install({PATH}, found.append)
    threading.excepthook = lambda args: None  # a refusal inside a thread ends that thread only
    spec = importlib.util.spec_from_file_location("cheat", PATH)
    mod = sys.modules["cheat"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    mod.honest()
    honest = list(found)
    for name, fn in mod.LAUNDERED.items():
        before = len(found)
        try:
            fn()
        except Exception:  # a refusal, or the route's own error after it did its work (update_wrapper)
            pass
        routes[name] = found[before:]
    n = len(found)
    routes["exit callback"] = []  # it runs at exit, after the printer above is registered: "at exit"
"""


def test_code_the_stdlib_runs_for_the_candidate_is_the_candidates(tmp_path):
    """text the candidate hands to timeit, code, runpy, doctest, pdb or typing, class writes through
    functools, and requests from threads it started are refused and recorded on the candidate's line that
    set them off; timeit of a callable, plain string annotations, warnings and threads running library
    code are not"""
    path = tmp_path / "cheat.py"
    path.write_text(LAUNDERED)
    (tmp_path / "other.py").write_text("x = 1\n")
    result = run(LAUNDERED_RUN.replace("PATH", repr(str(path))))
    assert result["honest"] == []
    result["routes"]["exit callback"] = result["at exit"]
    lines = LAUNDERED.splitlines()
    for name, found in result["routes"].items():
        assert found and found[0]["file"] == "cheat.py", (name, found)
        marker = "thread.start()" if name.startswith("thread") else f'"{name}":'
        assert marker in lines[found[0]["line"] - 1], (name, found)
