"""Judge mode: the candidate's module runs in a worker; the suite's verdicts are decided in the judge.

judge.py is the judge's side, worker.py the only process that imports candidate code, remote.py and
wire.py the calls and the bytes between them, protocol.py what both sides agree on."""
