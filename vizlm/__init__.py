"""vizlm: look inside attention-augmented recurrent language models.

The front door (:mod:`vizlm.api`; docs/API.md)::

    import vizlm

    lm = vizlm.load("amsrn")
    a = lm.analyze("The dogs in the park are barking .")
    a.show(target="barking")          # in Jupyter: highlighted text, effects, heat map
    a.frame(); a.attention_frame(); a.save("dogs.json")
    vizlm.compare("lstm-continued", "amsrn", corpus="brown", split="test").summary

The names are imported on first use (PEP 562), so ``import vizlm.data.text`` or ``vizlm.core.paths`` stays
light: only touching ``vizlm.load`` and the rest brings in torch and the models.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "load": "vizlm.api",
    "checkpoints": "vizlm.api",
    "corpora": "vizlm.api",
    "corpus_card": "vizlm.api",
    "prepare_corpus": "vizlm.api",
    "compare": "vizlm.api",
    "positions": "vizlm.api",
    "Model": "vizlm.api",
    "Analysis": "vizlm.api",
    "Attribution": "vizlm.api",
    "Comparison": "vizlm.api",
    "Positions": "vizlm.api",
    "View": "vizlm.api",
    "VizlmError": "vizlm.core.errors",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vizlm' has no attribute {name!r}")
    # importlib, not an import statement: the package root imports the API only when a name is used,
    # so the modules below the API that read __version__ from here do not depend on it (the layers).
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
