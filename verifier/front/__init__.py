"""front: a candidate's text, before anything is built.

Enters: the model's response (or a candidate file) and the task's backend. Leaves: the extracted program
(``extract.extract_code``), its static findings and resolved ``load_inline`` specs (``static.scan``), and the scans
of C++ sources (``vendor``) and of a built binary's libraries and imported symbols (``binary``, read by the ELF
reader ``elf``). Nothing here compiles or runs code.
May import: the standard library, ``verifier.cheats`` and ``verifier.common``.
"""
