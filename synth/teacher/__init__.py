"""The built-in offline teacher: real kernels for the op families it knows, with planted bugs.

lowering.py lowers a reference program to a plan of steps; writer.py writes the ModelNew file (the
shared host wrapper) and takes each step's kernel from cuda.py or cpu.py; compact.py is the short
teacher for the procedural programs of task_families.py (the training benchmark's corpus)."""
