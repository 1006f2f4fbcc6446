"""`localspec serve`: an OpenAI-compatible HTTP server over one Session (Starlette on uvicorn)."""
