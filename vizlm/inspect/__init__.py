"""Looking inside a model: one text analysed (``analysis``: probabilities, attention, highlights,
effects), what a prediction depended on (``attribution`` of one text, its methods' passes in ``attribution_methods``,
``agreement`` with the attention, ``attribution_corpus`` over a split), case labels against chance (``cases``),
statistics over a corpus split (``corpus_stats``), the literature's faithfulness tests (``faithfulness`` on one
text, ``faithfulness_erasure`` the slot-dropping ones, ``faithfulness_corpus`` over a split) and the on-disk cache
they share (``cache``). Computes; never draws."""
