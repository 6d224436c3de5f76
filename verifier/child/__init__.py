"""child: the code that runs inside the candidate's process (the execution child and its fork server).

Everything here is on the untrusted side of the trust boundary: the candidate's native code can change any byte
of this process, so nothing here measures a number a verdict reports or decides a verdict. ``worker`` runs a job
(imports the candidate, runs the trials on seeds asked one at a time over ``channel``, serves the harness's clocked
brackets through ``harness_client``); ``monitors`` and ``tamper`` are first signals, streamed to the verifier as
soon as they are filled; ``knockout`` loads the knockout shim; ``timing`` holds the launch probes.
May import: the standard library, torch and ``verifier.common`` only; ``tests/test_architecture.py`` keeps every
other verifier module out of this process (the import closure of ``child.worker`` and ``child.forkserver``).
"""
