"""Chat prompts the SmolLM2 integration tests answer (llama.cpp, and the torch backend's parity with it)."""

PROMPTS = [
    "Write a haiku about tea.",
    "List the first ten prime numbers, separated by commas.",
    "Repeat after me exactly: the quick brown fox jumps over the lazy dog. the quick brown fox",
    "Write a Python function that returns the factorial of n.",
    "What is the capital of France? Answer in one sentence.",
    "Translate 'good morning' into French, Spanish and German.",
    "Explain what a hash table is in two sentences.",
    "Count from 1 to 20.",
]
