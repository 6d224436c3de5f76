"""execute: the verifier's side of running a candidate, in the verifier's own process (trusted).

Enters: a job for an execution child (a built candidate, or a task's reference). Leaves: what the child did, as
the verifier saw it: the trusted harness's clocked brackets and its checks of every timed output (``harness``;
``common.ipc`` is the memory it shares with the child), the seeds handed out one call at a time and the records
streamed back (``channel``), the child's report, files and exit (``processes``: fork servers, sandboxed jobs,
timeouts, ``proc_cpu``), memory admission of concurrent jobs (``admission``), and the batch's execution queue,
which hands each built candidate to a slot (``queue``). Never imports, loads or runs
candidate code.
May import: the standard library, torch and ``verifier.common``.
"""
