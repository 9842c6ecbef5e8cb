"""Text and corpora: the tokenizer (``text``), vizlm's corpora and yours, their vocabularies and
examples (``registry``), token ids of a split at any size and the batches of an epoch (``tokens``), the
POS tagger and collocations the case rules read (``tagger``, ``resources``), and the build-time paths
from raw text to a corpus folder (``prepare`` for vizlm's corpora, ``ingest`` for a folder of yours).
Imports only ``vizlm.core``."""
