"""Looking inside a model: one text analysed (``analysis``: probabilities, attention, highlights,
effects; ``reading``: its rows and slots as the model reads it; ``effects``: slot effects on demand),
what a prediction depended on (``attribution`` of one text, its methods' passes in ``attribution_methods``,
``agreement`` with the attention, ``attribution_corpus`` over a split), case labels (``case_rules``, ``cases``)
against chance (``case_chance``) and over a corpus split (``case_gallery``), statistics over a corpus split
(``corpus_stats``), the literature's faithfulness tests (``faithfulness`` on one text, ``faithfulness_erasure``
the slot-dropping ones, ``faithfulness_corpus`` over a split) and the on-disk cache they share (``cache``).
Computes; never draws."""
