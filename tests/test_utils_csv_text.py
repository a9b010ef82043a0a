"""frame_csv against its oracle, pandas' own `to_csv(index=False)`, on every kind of column per_query.csv has."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cir_demo.utils.csv_text import frame_csv


def awkward_floats(rng, n):
    """Rounded metrics, exact zeros and ones, tiny and huge magnitudes, negatives, infinities and NaN."""
    pools = [
        rng.random(n).round(6),
        rng.choice([0.0, 1.0, -0.0, 0.5, 1e-06, 1e-05, 0.0001, 1e16, 1.5e17, 123456789012345.0, 2.5e-300], n),
        rng.standard_normal(n) * 10.0 ** rng.integers(-12, 20, n),
        rng.choice([np.nan, np.inf, -np.inf, 0.1, 0.2 + 0.1], n),
    ]
    return np.concatenate(pools)[rng.permutation(4 * n)][:n]


@pytest.mark.parametrize("seed", range(5))
def test_frame_csv_equals_pandas_to_csv(seed):
    rng = np.random.default_rng(seed)
    n = 400
    text = ["plain", "with, comma", 'with "quotes"', "new\nline", "", " spaced ", "ünïcode", "a|b"]
    df = pd.DataFrame(
        {
            "run": pd.Series(rng.choice(text, n)).astype("str"),
            "query_id": [f"query_{i:05d}" for i in range(n)],
            "ref2": pd.Series([None if rng.random() < 0.5 else "x" for _ in range(n)], dtype=object),
            "scored": rng.random(n) < 0.8,
            "n_pos": rng.integers(-3, 10**12, n),
            "small": rng.integers(0, 200, n).astype(np.int32),
            "metric@1": awkward_floats(rng, n),
            "metric@10": rng.random(n).round(6),
            "meta_bool": pd.Series(
                [None if rng.random() < 0.3 else bool(rng.random() < 0.5) for _ in range(n)], dtype=object
            ),
            "meta_int": pd.Series(
                [None if rng.random() < 0.3 else int(rng.integers(0, 40)) for _ in range(n)], dtype=object
            ),
            "meta_mixed": pd.Series(
                [[None, np.nan, 1.25, "t,x", ("a", "b"), True][int(rng.integers(6))] for _ in range(n)], dtype=object
            ),
        }
    )
    df.loc[rng.random(n) < 0.1, ["metric@10"]] = np.nan
    assert frame_csv(df) == df.to_csv(index=False)
    assert frame_csv(df.iloc[:0]) == df.iloc[:0].to_csv(index=False)


def test_frames_outside_the_plain_shape_are_left_to_pandas():
    dated = pd.DataFrame({"when": pd.to_datetime(["2024-01-01", None]), "x": [1.5, np.nan]})
    assert frame_csv(dated) == dated.to_csv(index=False)
    numbered = pd.DataFrame({0: [1, 2], 1: [0.5, np.nan]})
    assert frame_csv(numbered) == numbered.to_csv(index=False)
    categorical = pd.DataFrame({"c": pd.Categorical(["a", None, "b"]), "n": [1, 2, 3]})
    assert frame_csv(categorical) == categorical.to_csv(index=False)
    assert frame_csv(pd.DataFrame()) == pd.DataFrame().to_csv(index=False)
