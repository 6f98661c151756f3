"""Private aggregation (docs/privacy.md): accounting, the mechanism's pure functions, and the
aggregator that hands the server rule nothing but the decoded noisy aggregate."""

from asyncfl.privacy.accounting import calibrate_sigma, epsilon_spent
from asyncfl.privacy.aggregator import PrivacySetup, PrivateAggregator, build_privacy, summary
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
    "PrivacySetup", "PrivateAggregator", "build_privacy", "calibrate_sigma", "clip",
    "count_noise_std", "decode", "epsilon_spent", "gamma_from_xi", "payload",
    "postprocess_counts", "sensitivity", "summary", "update_noise_std", "xi_from_gamma",
]
