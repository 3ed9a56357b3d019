"""The integrity scan's recall and precision: every cheating route is flagged with its line, and no
honest solution (the references, the stubs, the habits a README allows) gets a finding."""

from __future__ import annotations

import pytest

from dojo import catalog
from dojo.grading.scan import integrity

CHEATS = {  # name: (kata, source, line the finding must name)
    "plain import": ("bpe", "from solutions.bpe import *\n", 1),
    "import of the package": ("bpe", "import solutions\nBPETokenizer = solutions.bpe.BPETokenizer\n", 1),
    "a twin": ("attention", "x = 1\nfrom solutions.system.kernels.attention_fast import attention\n", 2),
    "importlib, computed name": (
        "bpe",
        "import importlib\nm = importlib.import_module('sol' + 'utions.bpe')\n",
        2,
    ),
    "importlib, constant name": (
        "bpe",
        "import importlib\nm = importlib.import_module('solutions.bpe')\n",
        2,
    ),
    "__import__, computed": ("bpe", "name = 'solutions'\nm = __import__(name + '.bpe')\n", 2),
    "import_module aliased": (
        "bpe",
        "from importlib import import_module as im\nm = im(''.join(['solutions', '.bpe']))\n",
        2,
    ),
    "spec from a path": ("bpe", "import importlib.util as u\ns = u.spec_from_file_location('x', p)\n", 2),
    "exec via sys.path": ("bpe", "import sys\nfor p in sys.path:\n    exec(open(p + '/x.py').read())\n", 3),
    "eval": ("int4", "x = eval(open('f').read())\n", 1),
    "compile": ("int4", "code = compile(src, 'f', 'exec')\n", 1),
    "builtins by name": ("int4", "import builtins\nf = getattr(builtins, 'ex' + 'ec')\n", 1),
    "__builtins__": ("int4", "f = __builtins__['exec']\n", 1),
    ".pth files": ("bpe", "import glob\nfiles = glob.glob(sp + '/*.pth')\n", 2),
    "subprocess find": ("bpe", "import subprocess\nsubprocess.run(['find', '/'])\n", 1),
    "os.system": ("bpe", "import os\nos.system('find / -name bpe.py')\n", 2),
    "os.popen via getattr": ("bpe", "import os\nf = getattr(os, 'po' + 'pen')\n", 2),
    "sys.modules": ("generate", "import sys\nsuite = sys.modules['test_generate']\n", 2),
    "gc.get_objects": ("generate", "import gc\nobjs = gc.get_objects()\n", 2),
    "gc.get_referrers": ("generate", "from gc import get_referrers\nr = get_referrers(x)\n", 1),
    "frames": ("generate", "import inspect\nf = inspect.currentframe().f_back.f_globals\n", 2),
    "sys._getframe": ("generate", "import sys\ng = sys._getframe(1).f_globals\n", 2),
    "logging.currentframe": ("kv_cache", "import logging\nfr = logging.currentframe()\n", 2),
    "traceback.walk_stack": (
        "kv_cache",
        "import traceback\nfor fr, _ in traceback.walk_stack(None):\n    pass\n",
        2,
    ),
    "atexit": ("bpe", "import atexit\natexit.register(print)\n", 1),
    "os._exit": ("bpe", "import os\ndef encode(t):\n    os._exit(0)\n", 3),
    "from os import _exit": ("bpe", "from os import _exit\n", 1),
    "ctypes": ("bpe", "import ctypes\n", 1),
    "pytest": ("bpe", "import pytest\n", 1),
    "_pytest patch": (
        "bpe",
        "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n",
        1,
    ),
    "setsid daemon": ("bpe", "import os\nif os.fork() == 0:\n    os.setsid()\n", 2),
    "signal": ("bpe", "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n", 1),
    "a recursive glob": ("bpe", "import glob\nhits = glob.glob('/**/bpe.py', recursive=True)\n", 2),
    "the suite's file": ("bpe", "src = open('/tmp/x/tests/katas/test_bpe.py').read()\n", 1),
    "the results stream": ("bpe", "env = open('/proc/self/environ').read()\n", 1),
    "argv": ("bpe", "import sys\npath = sys.argv[-1]\n", 2),
    "a recursive search": ("bpe", "from pathlib import Path\nhits = list(Path('/').rglob('bpe.py'))\n", 2),
    "dunder escape": ("bpe", "classes = ().__class__.__base__.__subclasses__()\n", 1),
    "another kata's reference, not allowed": (
        "mixed_precision",
        "from solutions.roofline import phase_cost\n",
        1,
    ),
    "the roofline reference in the roofline kata": ("roofline", "from solutions.roofline import *\n", 1),
    "patching a library the suite compares with": (
        "attention",
        "import torch\ntorch.allclose = lambda *a, **k: True\n",
        2,
    ),
    "patching through setattr": (
        "attention",
        "import torch.testing as tt\nsetattr(tt, 'assert_close', print)\n",
        2,
    ),
    "patching a reference the suite uses": (
        "generate",
        "import solutions.model\nsolutions.model.Llama.prefill = None\n",
        2,
    ),
    "a module's __dict__": ("bpe", "import importlib\nf = importlib.__dict__['import_module']\n", 2),
    "site packages": ("bpe", "import site\nfolders = site.getsitepackages()\n", 1),
    "package file lists": ("bpe", "from importlib.metadata import files\n", 1),
    "path parts as words": ("bpe", "import os\np = os.path.join(root, 'tests', 'katas')\n", 2),
    "sys assigned to a name": ("generate", "import sys\ns = sys\nsuite = s.modules['test_generate']\n", 3),
    "sys imported as another name": ("generate", "import sys as q\ndef f():\n    return q._getframe(2)\n", 3),
    "sys through a list": ("generate", "import sys\nm = [sys][0].modules\n", 2),
    "posix.fork": ("bpe", "import posix\npid = posix.fork()\n", 2),
    "attrgetter f_back": ("generate", "import operator\nup = operator.attrgetter('f_back')\n", 2),
    "getattr tb_frame": ("generate", "def f(e):\n    return getattr(e.__traceback__, 'tb_frame')\n", 2),
    "exec built from pieces": ("int4", "f = getattr(__builtins__, 'ex' + 'ec')\nx = 1\n", 1),
    "exec from an f-string of pieces": ("int4", "a = 'ex'\nname = f'{a}ec'\n", 2),
    "getattr of os with a folded name": ("bpe", "import os\nrun = getattr(os, 'sys' + 'tem')\n", 2),
    "a joined import name": (
        "bpe",
        "import importlib\nm = importlib.import_module('.'.join(['solutions', 'bpe']))\n",
        2,
    ),
    "vars of a module written": ("attention", "import torch\nvars(torch)['allclose'] = print\n", 2),
    "a module's __dict__ updated": (
        "attention",
        "import torch.testing as tt\ntt.__dict__.update(assert_close=print)\n",
        2,
    ),
    "object.__setattr__ on an imported class": (
        "attention",
        "import torch\nobject.__setattr__(torch.Tensor, 'x', 1)\n",
        2,
    ),
    "setattr on an imported class": (
        "attention",
        "from torch import Tensor\nsetattr(Tensor, 'allclose', print)\n",
        2,
    ),
    "pickle of a reference": (
        "bpe",
        "import pickle\nm = pickle.loads(b'csolutions.bpe\\nBPETokenizer\\n.')\n",
        2,
    ),
    "exec from a %-format of pieces": ("int4", "name = '%sec' % 'ex'\n", 1),
    "a reference's name %-formatted from a tuple": (
        "bpe",
        "x = 1\nname = '%s.%s' % ('solutions', 'bpe')\n",
        2,
    ),
    "exec from str.format of pieces": ("int4", "a = 'ex'\nname = '{}ec'.format(a)\n", 2),
    "a module's name from str.format with a keyword": (
        "bpe",
        "name = '{s}.{m}'.format(s='solutions', m='bpe')\n",
        1,
    ),
    "timeit of a statement in text": (
        "latency",
        "import timeit\nt = timeit.timeit(stmt='import sys', number=1)\n",
        2,
    ),
    "timeit's setup in text": ("latency", "from timeit import Timer\ns = 'x' + '=1'\nTimer(f, s)\n", 3),
    "code's interpreter": ("bpe", "import code\ncode.InteractiveInterpreter().runsource('x = 1')\n", 2),
    "runsource on any object": ("bpe", "def f(i):\n    i.runsource('x = 1')\n", 2),
    "runpy": ("bpe", "import runpy\nrunpy.run_path('x.py')\n", 2),
    "doctest": ("bpe", "import doctest\ndoctest.run_docstring_examples(f, {})\n", 2),
    "pdb": ("bpe", "import pdb\npdb.run('x = 1')\n", 2),
    "an annotation in text that runs code": (
        "bpe",
        "import typing\nclass K:\n    x: \"__import__('sys')._getframe(0)\"\nh = typing.get_type_hints(K)\n",
        3,
    ),
    "an annotation that is a call": (
        "bpe",
        "from __future__ import annotations\ndef f(x: __import__('os').system('id')):\n    pass\n",
        2,
    ),
    "a ForwardRef": ("bpe", "import typing\nr = typing.ForwardRef(src)\n", 2),
    "__annotations__ by hand": ("bpe", "class K:\n    __annotations__ = {'x': int}\n", 2),
    "update_wrapper onto a torch class": (
        "kv_cache",
        "import functools, torch\nfunctools.update_wrapper(torch.Tensor, X, assigned=('data_ptr',))\n",
        2,
    ),
    "wraps onto an object's class": ("kv_cache", "from functools import wraps\nwraps(X)(type(t))\n", 2),
}


@pytest.mark.parametrize("name", CHEATS)
def test_a_cheat_is_flagged_on_its_line(tmp_path, name):
    """each way to reach the answer or the grader gets a finding that names its line"""
    slug, source, line = CHEATS[name]
    path = tmp_path / f"{slug}.py"
    path.write_text(source)
    findings = integrity.scan(path, slug)
    assert any(f.startswith(f"{slug}.py:{line}: ") for f in findings), f"{name}: {findings}"


HONEST = {  # name: (kata, source)
    "gc.disable around a timing": (
        "latency",
        (
            "import gc, time\ndef timed(fn):\n    gc.disable()\n    try:\n        t = time.perf_counter()\n"
            "        fn()\n        return time.perf_counter() - t\n    finally:\n        gc.enable()\n"
        ),
    ),
    "open() in save and load": (
        "bpe",
        (
            "import json\nfrom pathlib import Path\nclass BPETokenizer:\n    def save(self, path):\n"
            "        with open(path, 'w') as f:\n            f.write('bpe v1\\n' + json.dumps(self.pattern))\n"
            "    @classmethod\n    def load(cls, path):\n        lines = Path(path).read_text().splitlines()\n"
        ),
    ),
    "reading /sys for the cache size": (
        "roofline",
        (
            "from pathlib import Path\nimport glob\ndef last_level_cache_bytes():\n"
            "    sizes = [Path(p).read_text() for p in glob.glob('/sys/devices/system/cpu/cpu0/cache/index*/size')]\n"
            "    for index in Path('/sys/devices/system/cpu/cpu0/cache').glob('index*'):\n        pass\n"
        ),
    ),
    "the roofline reference where the README says so": (
        "latency",
        "from solutions.roofline import phase_cost\n",
    ),
    "and in batching": (
        "batching",
        "from solutions.roofline import arithmetic_intensity, bound, phase_cost\n",
    ),
    "and in int4": ("int4", "import solutions.roofline\nfrom solutions.model import LlamaConfig\n"),
    "the model in generate's docstring and code": (
        "generate",
        (
            '"""Uses solutions.model.Llama."""\nfrom solutions.model import tiny_model\n'
            "def f(model):\n    '''A model like solutions.model.Llama; see tests/ for nothing.'''\n    return model.eval()\n"
        ),
    ),
    "ordinary library use": (
        "int4",
        (
            "import re, math, time, statistics\nimport numpy as np\nimport torch\nfrom dataclasses import dataclass\n"
            "PAT = re.compile(r'x')\ndef f(dtype_name, x):\n    dtype = getattr(torch, dtype_name)\n"
            "    return torch.compile(x).eval(), getattr(x, dtype_name)\n"
        ),
    ),
    "prose and /proc/cpuinfo": (
        "roofline",
        (
            "def f():\n    text = open('/proc/cpuinfo').read()\n"
            "    raise ValueError(f'x ** 2 is not {text[:3]}: see the dojo.')\n"
        ),
    ),
    "torch settings": ("roofline", "import torch\ntorch.backends.mkldnn.enabled = True\n"),
    "own class patched through setattr and its __dict__": (
        "bpe",
        ("class T:\n    pass\nsetattr(T, 'x', 1)\nt = T()\nt.__dict__['y'] = 2\nvars(t).update(z=3)\n"),
    ),
    "os used for paths and a string naming eval mode": (
        "bpe",
        ("import os\np = os.path.join('a', 'b')\nmode = 'eval'\nname = 'model' + '.pt'\n"),
    ),
    "a method called compile": (
        "bpe",
        "class P:\n    def compile(self):\n        return 1\np = P().compile()\n",
    ),
    "timeit of a function": (
        "latency",
        (
            "import timeit\ndef f():\n    return 1\ndef g(fn):\n"
            "    return timeit.timeit(fn, number=3) + timeit.timeit(lambda: f(), number=2) + timeit.repeat(f, 'pass')[0]\n"
        ),
    ),
    "functools.wraps onto its own wrapper": (
        "bpe",
        (
            "import functools\ndef deco(fn):\n    @functools.wraps(fn)\n    def inner(*a):\n        return fn(*a)\n"
            "    return functools.update_wrapper(inner, fn)\n"
        ),
    ),
    "annotations, in text too": (
        "bpe",
        (
            "from __future__ import annotations\nimport typing\nfrom typing import Literal\nimport torch\n"
            "def f(x: 'torch.Tensor', m: Literal['a b', 'c'] = 'c') -> list[int] | None:\n    return None\n"
            "class K:\n    y: 'dict[str, tuple[int, ...]]'\nh = typing.get_type_hints(K)\n"
        ),
    ),
}


@pytest.mark.parametrize("name", HONEST)
def test_an_honest_solution_gets_no_finding(tmp_path, name):
    """what an honest solution does (a README allows it, or it is plain Python) is never flagged"""
    slug, source = HONEST[name]
    path = tmp_path / f"{slug}.py"
    path.write_text(source)
    assert integrity.scan(path, slug) == []


@pytest.mark.parametrize("slug", [k.slug for k in catalog.load() if k.has_suite])
def test_references_and_stubs_get_no_finding(slug):
    """every reference and every stub scans clean"""
    kata = catalog.get(slug)
    assert integrity.scan(kata.reference, slug) == [] and integrity.scan(kata.stub, slug) == []


def test_a_file_that_does_not_parse_gets_no_finding(tmp_path):
    """a syntax error is the grading's to report, not the scan's"""
    path = tmp_path / "bpe.py"
    path.write_text("def f(:\n")
    assert integrity.scan(path, "bpe") == []


ENCODED = {  # name: (bytes, line of the finding)
    "unicode_escape hides an import in a comment": (
        b"# coding: unicode_escape\nx = 1  # \\nimport solutions.bpe\n",
        1,
    ),
    "utf-7 hides one too": (b"# -*- coding: utf-7 -*-\nx = 1  #+AAo-import os\n", 1),
    "latin-1 on line 2": (b"#!/usr/bin/env python\n# coding: latin-1\ns = '\xe9'\n", 2),
    "an unknown codec": (b"# coding: rot-13-ish\nx = 1\n", 1),
    "bytes invalid in UTF-8": (b"x = 1\ny = '\xff'\n", 2),
}


@pytest.mark.parametrize("name", ENCODED)
def test_the_source_is_read_as_python_reads_it(tmp_path, name):
    """a coding cookie other than UTF-8, or bytes Python would refuse, is a finding on its line, never a crash"""
    data, line = ENCODED[name]
    path = tmp_path / "bpe.py"
    path.write_bytes(data)
    findings = integrity.scan(path, "bpe")
    assert any(f.startswith(f"bpe.py:{line}: ") for f in findings), f"{name}: {findings}"


def test_what_a_cookie_hides_is_scanned(tmp_path):
    """the scan sees the code the interpreter runs: the import unicode_escape hid in a comment is flagged
    (on line 3 of the decoded text, the line a traceback would name)"""
    path = tmp_path / "bpe.py"
    path.write_bytes(b"# coding: unicode_escape\nx = 1  # \\nimport solutions.bpe\n")
    assert any(f.startswith("bpe.py:3: imports solutions.bpe") for f in integrity.scan(path, "bpe"))


def test_a_bom_and_a_utf8_cookie_are_plain(tmp_path):
    """a UTF-8 byte-order mark or an explicit UTF-8 cookie is not a finding"""
    for data in (b"\xef\xbb\xbfx = 1\n", b"# -*- coding: utf-8 -*-\nx = 'caf\xc3\xa9'\n"):
        path = tmp_path / "bpe.py"
        path.write_bytes(data)
        assert integrity.scan(path, "bpe") == []


def test_banned_uses_reads_as_python_reads(tmp_path):
    """dojo.testing.banned_uses sees the import a utf-7 cookie hides, and reports bytes it cannot decode"""
    from dojo.testing import banned_uses

    path = tmp_path / "bpe.py"
    path.write_bytes(b"# coding: utf-7\nx = 1  #+AAo-import tiktoken\n")
    assert banned_uses(path, {"tiktoken"}) == ["line 3: tiktoken"]  # the decoded text's line
    path.write_bytes(b"x = '\xff'\n")
    assert banned_uses(path, {"tiktoken"})[0].startswith("line 1: cannot be read")
