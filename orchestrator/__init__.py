"""The orchestrator: the stage list, the pipeline that runs it, the progress display and Ctrl-C handling, the
training loop and resume (the ledger).

It stands above every package it drives (kernelmill's ground -- schema, store, settings, errors,
config -- and graphs/, synth/, curation/, verifier/, train/); none of them imports it
(tests/test_stages.py and tests/test_architecture.py check that, and that no import circle exists). flows/ stands
above it: the one CLI (flows/cli.py) and the Prefect flows made from the same stage list.
"""
