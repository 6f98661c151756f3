"""The confirmatory study of the momentum approximation (issue 37; docs/confirm.md).

``plan.toml``  the pre-registered plan: claims, designs, planned comparisons, decision rules
``designs/``   each design's spec, in the review-study format (:mod:`analysis.ma_review`)
``plan``       reading and validating the plan; the plan's and each design's digest
``record``     ``confirm.json``: the digest a design's folder was started under
``report``     ``report.md``: the planned comparisons, Holm within each claim, the verdicts
"""
