"""vizlm: look inside attention-augmented recurrent language models."""

__version__ = "0.1.0"
