"""The statistical bound the distribution tests share."""

import numpy as np


def chi2_bound(df: int, z: float = 4.753) -> float:
    """Wilson-Hilferty: the chi-square value a correct sampler exceeds with probability 1e-6
    (z is the standard normal's 1 - 1e-6 quantile)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def assert_law(counts: np.ndarray, exact: np.ndarray) -> None:
    """counts drawn from the law `exact` (same shape): cells of probability 0 are never
    drawn; the rest pass a chi-square test at false-failure probability 1e-6 (cells expecting
    fewer than 5 draws pooled into one)."""
    n = counts.sum()
    assert counts[exact == 0].sum() == 0, "a token of probability 0 was emitted"
    expected = exact[exact > 0].ravel() * n
    observed = counts[exact > 0].ravel()
    small = expected < 5
    expected = np.append(expected[~small], expected[small].sum())
    observed = np.append(observed[~small], observed[small].sum())
    if expected[-1] == 0:
        expected, observed = expected[:-1], observed[:-1]
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 <= chi2_bound(len(expected) - 1), (chi2, chi2_bound(len(expected) - 1))
