"""Errors meant for the user: each says what was wrong and what to do. The CLI prints them as one line."""


class LocalspecError(Exception):
    """Base class of every error the user should see as a message, not a traceback."""


class ModelError(LocalspecError):
    """A model file is missing, corrupt, unsupported or unknown."""


class ConfigError(LocalspecError):
    """A bad option value or a malformed models.toml."""


class ContextOverflow(LocalspecError):
    """A prompt or conversation does not fit in the model's context window."""


class GrammarError(LocalspecError):
    """An answer's grammar cannot be followed any further (it became too costly, or refused what it allowed)."""
