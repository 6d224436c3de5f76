"""The measurement harness: what bench/ scripts and tests (tests/, tests/gpu) share, and no product module imports.

    testbed            the test bed of model-written KernelBench solutions (select, shard, run, the real-code batch)
    testbed_report     its verdict rows and reports (merge, classify, compare two runs)
    real_report        the real-code batch's records and report (bench/bench_verifier.py --batch real: rate, stages)
    testbed_sources    builds ext/testbed from the mirrors of the source repositories (bench/testbed_build.py)
    fixtures           small tasks and candidates, honest and cheating, for the verifier's tests and benchmarks
    mixed_batch        the mixed batch of 8 level 1-2 tasks that bench/bench_verifier.py --batch mixed measures
    proc_cpu           host CPU seconds by kind of process over a benchmark (compilers, execution children, ...)
    reap               runs a command and ends every process it left (the GPU check's cleanup: bench/gpu_check.sh)
    build_breakdown    a batch's builds by the variant that produced each module, the fast variants that failed first
    slim_testbed       how often the slim build variant compiles for the test bed's solutions, and why not
    torch_imports      what model-written answers take from PyTorch's libraries (the C01 allowlist's fidelity)
    planted_corpus     a corpus with planted near-duplicates, for the dedup benchmark's recall
    rewrites           rewritten copies of benchmark programs, for the decontamination benchmark's recall
    task_families      procedural task families (tiers of fused row ops) for the training benchmarks
    teacher_compact    the compact teacher's answers to those families; teacher_coverage: which ops the teacher lowers
    teacher_warm_start two-turn repair dialogues from planted bugs (the loop benchmark's warm start)
    family_corpus      the training benchmarks' corpora from those families; train_tiers: their tiered splits
    train_export       a trained checkpoint exported for serving, as the training benchmarks do
    train_report       the training benchmarks' tables (bootstrap intervals, paired differences)
    loop_report        the loop benchmark's report (loop.md)
    loop_arms          the loop benchmark's ablation arms and the start they share

These modules import the product (kernelmill, verifier, synth, train, curation, orchestrator); the product never
imports them (tests/test_architecture.py checks it). Import as ``from bench.lib import fixtures as fx`` with the
repository root on sys.path (tests/conftest.py and every bench script put it there).
"""
