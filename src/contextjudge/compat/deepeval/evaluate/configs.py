"""``deepeval.evaluate.configs``: the config objects."""

from .._evaluate import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig

__all__ = ["AsyncConfig", "CacheConfig", "DisplayConfig", "ErrorConfig"]
