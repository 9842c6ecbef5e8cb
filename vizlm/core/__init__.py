"""The foundation every layer stands on: the base of vizlm's errors (``errors``), the names every door accepts
(``choices``: devices, model families), every location (``paths``), every write to disk (``files``: temporary
name, rename, nothing replaced unasked) and the process group of a data-parallel run (``distributed``). Nothing
here imports another vizlm package."""
