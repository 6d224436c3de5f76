"""judge: from what an execution showed to a Verdict, in the verifier's process.

Enters: the task program, the child's report and files, the streamed records and the harness's clocked figures.
Leaves: the Verdict (``verdict.judge``, stage by stage, running the registered checks of ``checks``). What the verifier learns about a task once (``plan``: reference outputs on
private seeds, tolerance budgets, the extra shape; kept on disk by ``prep_cache``), correctness against those
outputs (``outputs``, with the per-element budgets of ``numerics`` (the budget, the comparison), ``budgets`` (where each output's comes from) and ``reduction``, and ``lowering`` naming a miss C13 or wrong), the legality policies and
the knockout run of the partial policy (``knockout``), the times and speedups (``speedups``), the reward (``reward``) and the feedback a
repair turn reads (``feedback``).
May import: the standard library, torch, ``kernelmill.schema`` / ``errors``, ``verifier.cheats``,
``verifier.common``, ``verifier.execute`` (the harness's and the channel's records), ``verifier.child`` for file
names only, and ``verifier.front.binary`` (the binary's scans).
"""
