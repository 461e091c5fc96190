"""`CompressionError`, in its own module so that the budget rules (allocation.py) and the
compressor base (base.py) can both raise it without importing each other."""


class CompressionError(ValueError):
    """Bad input or parameters for a compressor."""
