"""The experiment engine (docs/architecture.md §9): what every study of many runs is built on.

* :mod:`asyncfl.studies.sweep` — a grid of scenario keys × seeds, its point names and scenarios,
  run through the placement layer (:mod:`asyncfl.run.parallel`: in process, a process pool or
  Ray) in a folder claimed and resumed by the folder rule (:mod:`asyncfl.run.outdir`), tabulated
  with Student-t 95 % intervals (:func:`asyncfl.figures.ci.mean_ci`); ``asyncfl sweep``;
* :mod:`asyncfl.studies.stats` — paired comparisons over seeds (the speed-up of one method over
  another with its interval);
* the study method (docs/studies.md): :mod:`asyncfl.studies.crossing` (the interval-censored
  step at which a curve reaches its target), :mod:`asyncfl.studies.survival` (Kaplan–Meier, the
  restricted mean steps to target, the paired bootstrap ratio of two methods),
  :mod:`asyncfl.studies.stopping` (runs stopped at the study's highest target, every crossing kept),
  :mod:`asyncfl.studies.effects` (paired differences, the interaction of an effect with ``K``),
  :mod:`asyncfl.studies.tuning` (held-out tuning seeds, the ×2 refinement, the choice and the
  width of the good learning-rate range).

Studies of their own (the momentum-approximation study, the privacy–utility sweep) are scripts
under ``analysis/`` on top of this engine; nothing here knows them. Run files are read back
through :class:`asyncfl.results.Run`.
"""

from asyncfl.studies.crossing import Crossing, crossing
from asyncfl.studies.effects import Difference, Interaction, interaction, paired_difference
from asyncfl.studies.survival import (Comparison, SurvivalCurve, common_horizon, compare_crossings, expanded_level,
                                      kaplan_meier, log_restricted_ratios, paired_rmst_ratio, restricted_mean, restricted_means)
from asyncfl.studies.stopping import stopped_at_target, target_stop
from asyncfl.studies.tuning import Choice, SeedSplit, choose, refine, sensitivity, split_seeds

__all__ = ["Choice", "Comparison", "Crossing", "Difference", "Interaction", "SeedSplit", "SurvivalCurve", "choose",
           "common_horizon", "compare_crossings", "crossing", "expanded_level", "interaction", "kaplan_meier", "log_restricted_ratios", "paired_difference", "paired_rmst_ratio",
           "refine", "restricted_mean", "restricted_means", "sensitivity", "split_seeds", "stopped_at_target", "target_stop"]
