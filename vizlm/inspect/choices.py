"""The names the inspect layer offers as choices (attribution methods, case labels, case rankings), kept where
no heavy import follows them: the command line's parser is built from these without loading PyTorch.

Each is read from here by the module that gives it meaning: :mod:`vizlm.inspect.attribution` (``METHODS``,
``MAX_STEPS``), :mod:`vizlm.inspect.case_rules` (``LABEL_DESCRIPTIONS``, ``LABELS``) and
:mod:`vizlm.inspect.case_gallery` (``RANK_FIELDS``, ``RANKINGS``), under those names.
"""

from __future__ import annotations

ATTRIBUTION_METHODS = {  # the interface's names -> what each measures
    "gradient-x-input": "gradient of log P(target) times the input embedding, summed over its dimensions",
    "integrated-gradients": "gradients integrated from zero embeddings to the input, times the input",
    "occlusion": "log P(target) minus the same with the input token replaced by <unk>",
    "slot-effect": "log P(target) minus the same with the token's memory slot dropped (attention models)",
}
ATTRIBUTION_MAX_STEPS = 512  # integrated gradients: the most steps any door accepts (API, CLI, app); the doubling stops here too

CASE_LABEL_DESCRIPTIONS = {  # label -> what its rule checks, in the order the rules run
    "trigger": "the attended word comes back: same word, same stem, or a pronoun for the same entity",
    "causal": "a causal connective (because, so, due to, …) or cause–effect verb links the two",
    "phrase": "the attended word starts a phrase the target completes (collocation statistics of Brown train)",
    "grammar": "a grammatical dependency: subject–verb agreement, determiner → noun, auxiliary → verb form",
}
CASE_LABELS = tuple(CASE_LABEL_DESCRIPTIONS)

# How corpus_cases picks its examples -> the field of a case (and of an example) it ranks by: the heaviest, the
# most helpful slot, the most weight above an even spread over the slots the row could attend to
# (Case.above_uniform: one slot gets weight 1, choosing nothing), or the attended word the prediction depended
# on most (gradient x input: computed for this ranking only, vizlm.inspect.case_gallery.attribute_cases).
CASE_RANK_FIELDS = {"weight": "weight", "effect": "effect", "above_uniform": "above_uniform",
                    "attribution": "attribution_bits"}
CASE_RANKINGS = tuple(CASE_RANK_FIELDS)
