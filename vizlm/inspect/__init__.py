"""Looking inside a model: one text analysed (``analysis``: probabilities, attention, highlights,
effects), what a prediction depended on (``attribution``), case labels against chance (``cases``),
statistics over a corpus split (``corpus_stats``), the literature's faithfulness tests
(``faithfulness``) and the on-disk cache they share (``cache``). Computes; never draws."""
