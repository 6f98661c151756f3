"""Private aggregation (docs/privacy.md): accounting, the mechanism's pure functions, and the
aggregator that hands the server rule nothing but the decoded noisy aggregate."""

from asyncfl.privacy.accountants import Releases
from asyncfl.privacy.accounting import calibrate_sigma, epsilon_of, epsilon_spent, sigma_for
from asyncfl.privacy.aggregator import (
    PrivacySetup, PrivateAggregator, build_privacy, epsilon_curve, resolve_sigma, run_shape, sampling_report, summary,
)
from asyncfl.privacy.sampling import RunShape
from asyncfl.privacy.mechanism import (
    clip,
    count_noise_std,
    decode,
    gamma_from_xi,
    payload,
    postprocess_counts,
    sensitivity,
    update_noise_std,
    xi_from_gamma,
)

__all__ = [
    "PrivacySetup", "PrivateAggregator", "Releases", "RunShape", "build_privacy", "calibrate_sigma", "clip",
    "count_noise_std", "decode", "epsilon_curve", "epsilon_of", "epsilon_spent", "gamma_from_xi", "payload",
    "postprocess_counts", "resolve_sigma", "run_shape", "sampling_report", "sensitivity", "sigma_for", "summary", "update_noise_std", "xi_from_gamma",
]
