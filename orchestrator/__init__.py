"""The orchestrator: the stage list, the pipeline that runs it, the CLI (with its progress display and
its Ctrl-C handling) and the Ray executor.

It stands above every package it drives (kernelmill's ground -- schema, store, settings, errors,
config -- and graphs/, synth/, curation/, verifier/, train/); none of them imports it
(tests/test_stages.py checks that, and that no import circle exists). flows/ wraps the same
stage list in Prefect and sits beside it.
"""
