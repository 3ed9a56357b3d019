"""Judge mode: the candidate's module runs in a worker; the suite's verdicts are decided in the judge.

judge.py is the judge's side, worker.py the process that imports and runs the candidate's module,
remote.py and wire.py the calls and the bytes between them, protocol.py what both sides agree on,
peak.py the worker's peak memory as the judge reads it from outside."""
