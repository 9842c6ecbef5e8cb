"""Models as files and as training runs: the one checkpoint loader and writer (``checkpoint``:
safetensors + JSON, validated, never unpickled), training (``train``, its options ``config`` and its
resume state ``resume``), perplexity (``evaluate``) and models trained elsewhere (``importer``:
pytorch/examples' word_language_model). The families themselves are in ``vizlm.models``; corpora come
from ``vizlm.data``."""
