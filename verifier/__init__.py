"""The execution verifier. Every caller verifies through ``verifier.entry.verify`` (one entry: extraction,
identical-code reuse, local or Ray dispatch, streaming); verifier/README.md describes the stages."""
