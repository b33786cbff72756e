"""The test suite. Imported before tests/conftest.py and anything it loads: the test run's native thread
pools are set here, before numpy or scikit-learn start theirs.

One thread per OpenMP/BLAS pool in every test worker and in every process it starts (services, examples,
Dask workers), unless you set the variables yourself: xdist runs a worker per core already, and a pool per
core inside each makes their spin waits fight (a 2,000-row gradient-boosting fit: 11.5 s instead of 0.23 s
with the other core busy). ``serve --workers`` shares the cores out the same way
(labeldp/common/serving.py)."""

import os

from labeldp.common.serving import THREAD_POOL_ENV

for _pool in THREAD_POOL_ENV:
    os.environ.setdefault(_pool, "1")
