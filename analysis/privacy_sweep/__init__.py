"""The privacy–utility sweep of private momentum approximation (docs/privacy.md; docs/privacy.md,
"What a run reports"), a script on the library's experiment engine: run it from the repository
root as ``python -m analysis.privacy_sweep SCENARIO --xi … --out DIR`` (:mod:`analysis.privacy_sweep.__main__`).

With private aggregation the server sees one noisy sum per step,
``Σ_k y_k + N(0, σ² S² I)`` with ``y_k = w(τ_k)·clip(Δ_k, S_Δ) ⊕ γ·onehot_L(τ_k)`` and
``S = √(S_Δ² + γ²)`` (docs/privacy.md). At a fixed privacy budget (ε, δ) the noise multiplier σ is
fixed too (calibrated once, for q = C/N over the run's T server steps); what remains free is
how the sensitivity is split between the model update and the staleness counts, i.e. ``γ`` —
or equivalently the count-noise level ``ξ = σS/γ`` (``γ = σ S_Δ / √(ξ² − σ²)``, ``ξ > σ``).
Per coordinate, after dividing by the buffer size ``C``:

* update noise on ``r_t``:            ``σS/C = σ S_Δ ξ / (C √(ξ² − σ²))``  → ``σ S_Δ / C`` as ξ → ∞,
  and → ∞ as ξ ↓ σ;
* count noise on a row of ``Ŵ``:      ``ξ / C``  (before the ``(τ+1)^(−p)`` factor).

A row of ``W`` holds fractions ``C_{t,s}/C`` that sum to at most 1, so once ``ξ/C`` approaches
1 the server's estimate ``Ŵ`` is mostly noise and momentum approximation — which fits
``A Ŵ ≈ M`` — can no longer remove the implicit momentum bias of the *exact* ``W``: its bias
``‖A W − M‖_F / ‖M‖_F`` (docs/server-rules.md, with ``A`` computed on ``Ŵ``) rises towards, and past,
naive momentum's (``A = M``, which does not depend on ``Ŵ`` at all). At the other end
(ξ close to σ) the counts are precise but the update noise explodes.

Modules, each importing only those above it:

=========================  ===================================================================
``spec``                   the sweep's vocabulary: rules, columns, :class:`Budget`, points, rows,
                           :class:`SweepError` (torch-free: the command line reads ``RULES``)
``plan``                   σ resolved once (:func:`resolve_budget`), the points, one scenario per point
``tables``                 ``sweep.csv``, aggregation over seeds, findings, ``sweep.md``
``figures``                ``sweep.png``
``outputs``                all three files at once
``run``                    :func:`run_sweep`: one run per (seed, ξ, rule), rows read back
``__main__``               the command line: arguments, progress display, table, exit codes
``xi_rule``                the rule for ξ: ``argmin u(ξ) + e(ξ)`` from public configuration
                           (docs/privacy.md, "Choosing ξ")
``study_spec``             the ξ study's spec (TOML, validated; torch-free)
``study_report``           the ξ study's numbers, report and figures from ``results.csv`` alone
``study``                  the ξ study: tuning under DP on held-out seeds, the ξ grid around the
                           rule's ξ* and its refinement, the check task, ``results.csv``;
                           ``python -m analysis.privacy_sweep.study run SPEC --out DIR`` /
                           ``… report DIR``
=========================  ===================================================================

Run it as::

    python -m analysis.privacy_sweep scenarios/private_synthetic.toml --xi 1.2 2 4 10 25 60 120 200 \\
        --rules ma-light ma-full momentum --out runs/privacy_synthetic --overwrite
"""
