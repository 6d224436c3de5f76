"""serve: the verifier for its users: ``kernelmill verify`` / ``kernelmill metrics`` (``commands``), the HTTP reward
service and its client (``service``, ``client``), and the figures over a run (``metrics``, ``cost``).
Enters: requests and candidates. Leaves: verdicts and their summaries. Calls into verification through
``verifier.entry`` only.
"""
