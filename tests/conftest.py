"""Project-wide test configuration. The grading plugin itself is dojo.grading.suite.plugin (loaded via addopts).

Under pytest-xdist (`make test` runs JOBS workers on as many cores), each worker and the processes it
starts use one thread: two workers each running OpenMP's threads on 2 cores spin on each other's
descheduled threads and run 10-50x slower. tests/system/test_fused_step.py checks the threaded split.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the processes tests start: read at their torch import
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
