"""The layouts of a folder of text that :mod:`vizlm.data.ingest` reads (detected, or chosen with ``layout=`` /
``--layout``). Light (no torch), so that the command line's parser is built without loading PyTorch."""

from __future__ import annotations

LAYOUT_HELP = {  # layout -> what its lines are
    "sentence": "one sentence a line; a blank line ends a document",
    "paragraph": "one paragraph a line, split into sentences; a blank line ends a document",
    "wikitext": "WikiText: ' = Title = ' starts an article (the document); ' = = Section = = ' headings dropped",
}
LAYOUTS = tuple(LAYOUT_HELP)
