"""ltowrap: a compiler wrapper that turns ThinLTO links into distributed ThinLTO links."""

__version__ = "0.1.0"
