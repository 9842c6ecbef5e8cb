"""Names every door (the command line, the app, the API) accepts as a choice, kept where no heavy import
follows them: the command line's parser is built from these without loading PyTorch or the models, so
``vizlm --help`` and a mistyped option answer at once.

Each list belongs to the layer that gives it meaning and is read from there: the devices to
:func:`vizlm.core.distributed.resolve_device`, the model families to :data:`vizlm.models.REGISTRY`, which
holds their classes in this order (``tests/test_cli.py`` checks the two agree), the import sources to
:mod:`vizlm.modeling.importer`.
"""

from __future__ import annotations

# auto: the GPU when CUDA is available, else the CPU
DEVICES = ("auto", "cpu", "cuda")
# the built-in model families; installed plugins add theirs (vizlm.models.names())
FAMILIES = ("lstm", "amsrn", "attention", "kv", "kvp", "ngram", "salton", "rm", "transformer")
# what `vizlm import` converts (vizlm.modeling.importer)
IMPORT_SOURCES = ("pytorch-examples",)
