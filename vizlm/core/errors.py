"""The base of every error vizlm raises on bad input: :class:`VizlmError`.

Everything a user can get wrong (a model name or a file that is not a checkpoint, an empty text,
a corpus or split that does not exist, a threshold out of range, a file that would be replaced)
raises a subclass of it, with a message written for a person: ``except vizlm.VizlmError`` catches
them all, and nothing else. The subclasses keep the built-in base they had (``CheckpointError`` is
also a ``ValueError``), so code that catches ``ValueError`` keeps working.

It is in the lowest layer (nothing to import) so that every module can derive from it.
"""

from __future__ import annotations


class VizlmError(Exception):
    """Bad input to vizlm, with a message meant for the user (the base of every such error)."""


class InputError(VizlmError, ValueError):
    """An argument that vizlm cannot use (a threshold out of range, a word that is not in the text)."""
