"""The measurement harness: what bench/ scripts and tests (tests/, tests/gpu) share, and no product module imports.

    testbed          the test bed of model-written KernelBench solutions (select, shard, run, the real-code batch)
    testbed_report   its verdict rows and reports (merge, classify, compare two runs)
    testbed_sources  builds ext/testbed from the mirrors of the source repositories (bench/testbed_build.py)
    fixtures         small tasks and candidates, honest and cheating, for the verifier's tests and benchmarks
    mixed_batch      the mixed batch of 8 level 1-2 tasks that bench/bench_verifier.py --batch mixed measures

These modules import the product (kernelmill, verifier); the product never imports them
(tests/test_architecture.py checks it). Import as ``from bench.lib import fixtures as fx`` with the repository
root on sys.path (tests/conftest.py and every bench script put it there).
"""
