"""The variables the verifier sets for its own child processes (fork servers, execution children, build steps).

Internal: none is a setting, and a user setting one changes nothing the verifier promises; the settings are
``[verify]`` keys (verifier/common/config.py, ``KERNELMILL_VERIFY_<KEY>``). The sandbox keeps these across its cleared
environment (``sandbox.ENV_KEEP``). Every name starts with ``_KM_`` so that none reads as a switch."""

SANDBOXED = "_KM_SANDBOXED"  # "1": this process runs inside bubblewrap (its namespaces are already private)
SANDBOX_NOTE = "_KM_SANDBOX_NOTE"  # JSON of sandbox.status() in the verifier's process, for the verdict's versions
SERVE_WARM = "_KM_SERVE_WARM"  # "1": the fork server forks each job's child ahead (warm_processes)
WARM_BACKEND = "_KM_WARM_BACKEND"  # the warm fork server's backend (cpu, cuda)
CHILD_OMP_THREADS = "_KM_CHILD_OMP_THREADS"  # the OMP_NUM_THREADS a fresh child would have had (warm servers)
CPU_PERTURB = "_KM_CPU_PERTURB"  # M_PERTURB byte the cpu fork server poisons freed heap with
NO_PRELOAD = "_KM_NO_PRELOAD"  # "1": the fork server restarted without its preload (it broke forking)
HOST_WAITS = "_KM_HOST_WAITS"  # block or spin: how a warm child waits on the device (VerifyConfig.host_waits)

ALL = (SANDBOXED, SANDBOX_NOTE, SERVE_WARM, WARM_BACKEND, CHILD_OMP_THREADS, CPU_PERTURB, NO_PRELOAD, HOST_WAITS)
