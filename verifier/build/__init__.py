"""build: compiling a candidate's ``load_inline`` extensions.

Enters: resolved specs from ``front``. Leaves: a built module per spec key (``pool.CompilePool``,
``pool.build_blocking``; one build's variants and steps: ``steps``; its kept result: ``result``), or a compile error
with the compiler's first lines; the precompiled header (``pch``),
the object cache shared across candidates and runs (``objcache``, ``binding``) and the slim build (``slim``) make
it cheaper. The compiler runs in torch-free step processes (``proc``), in the sandbox.
May import: the standard library, torch, ``verifier.front`` and ``verifier.common``.
"""
