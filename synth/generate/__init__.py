"""Candidate generation and repair: prompts, generators, the one Candidate builder, dialogues.

prompts.py builds the first-turn and repair prompts; reasoning.py the reasoning traces;
generators.py the Generator interface (OpenAI-compatible client, the built-in teacher) and
``make_candidate``; repair.py the multi-turn dialogues that quote the verifier's feedback."""
