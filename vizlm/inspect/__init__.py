"""Looking inside a model: one text analysed (``analysis``: probabilities, attention, highlights,
effects; ``reading``: its rows and slots as the model reads it; ``effects``: slot effects on demand),
what a prediction depended on (``attribution``), case labels (``case_rules``, ``cases``) against chance
(``case_chance``) and over a corpus split (``case_gallery``), statistics over a corpus split
(``corpus_stats``), the literature's faithfulness tests (``faithfulness``) and the on-disk cache they
share (``cache``). Computes; never draws."""
