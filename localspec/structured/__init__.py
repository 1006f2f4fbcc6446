"""Structured output: what the answer must follow (a JSON Schema, any JSON object, a GBNF, Lark or regex
grammar) compiled by llguidance (grammar.py), and one answer's matcher over the model's vocabulary: the mask of
each row the target samples, the cut of drafts the grammar forbids and the tokens it forces (constraint.py)."""
