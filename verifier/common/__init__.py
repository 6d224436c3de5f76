"""common: what both sides of the trust boundary load: the settings (``config``), the typed contract between the
verifier and an execution child (``contract``), inputs drawn from seeds (``inputs``), the backends' device facts
(``backends``), the build spec and key (``spec``), the shared-memory pool (``ipc``), the device lock
(``devlock``), how its processes wait on the device (``hostwait``), the sandbox's set-up (``sandbox``) and the child's environment names (``childenv``).

Nothing here measures or decides a verdict: these are dataclasses, names and pure functions, so loading them in
the candidate's process gives it nothing to change that the verifier relies on.
May import: the standard library, torch, ``kernelmill.schema`` / ``kernelmill.errors`` and each other.
"""
