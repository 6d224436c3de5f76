"""Annotation: per-op shapes, FLOPs, bytes, roofline floor, level and curriculum order.

annotator.py turns one traced run of a reference (trace_worker.py, a worker process) into
annotations against a roofline device (devices.py); store.py is the stage: rows written as they
finish, failures remembered across runs. Empty on purpose: the trace worker imports its module alone."""
