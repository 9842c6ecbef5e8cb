"""Text and corpora: the tokenizer (``text``), the corpus folder's format, its one writer and reader
(``folder``), vizlm's corpora and yours (``registry``), vocabularies and the word rule (``vocab``), example
sentences and passages (``examples``), token ids of a split at any size (``tokens``), every batcher
(``batches``), the POS tagger and collocations the case rules read (``tagger``, ``resources``), and the
build-time paths from raw text to a corpus folder (``prepare`` for vizlm's corpora, ``ingest`` for a folder
of yours). Imports only ``vizlm.core``."""
