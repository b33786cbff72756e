"""Real datasets shipped with the package (provenance and licenses in PROVENANCE.md).

Each loader returns the label column as float64 and the public parameters a deployment would fix
in advance for it (bounds and support); none of them is computed from the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.mechanisms import Support, integer_grid, uniform_grid

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class LabelDataset:
    name: str
    table: pa.Table
    label_column: str
    lo: float  # public bounds, fixed before looking at the data
    hi: float
    support: Support
    integer: bool
    description: str

    @property
    def labels(self) -> np.ndarray:
        return np.asarray(self.table.column(self.label_column).to_numpy(), dtype=np.float64)

    @property
    def features(self) -> pa.Table:
        drop = {self.label_column, "income"}
        return self.table.select([c for c in self.table.column_names if c not in drop])


def weeks_worked() -> LabelDataset:
    """1980 US Census (AER::Fertility): weeks worked in 1979, integers 0..52 (a year has 52 weeks)."""
    return LabelDataset(
        "weeks",
        pq.read_table(_HERE / "b_fertility_weeks_worked.parquet"),
        "work",
        0.0,
        52.0,
        integer_grid(0, 52),
        True,
        "census weeks worked (AER::Fertility), n=254,654, labels 0..52",
    )


# A public cap on a single diamond's price for this marketplace: 20,000 USD. Prices above it would be
# clipped (none are in this dataset; its maximum is 18,823). The support is a 201-point grid with a
# 100 USD step: rounding to it adds at most 50 USD of error, negligible beside DP noise.
PRICE_CAP_USD = 20_000.0
PRICE_GRID_POINTS = 201


def diamond_prices() -> LabelDataset:
    """ggplot2::diamonds sale prices (USD), clipped at the public cap of 20,000 USD. The rows are
    ordered by price (the first 2,000 cost 326-3,099 USD): draw a sample at random, not the first
    rows."""
    return LabelDataset(
        "prices",
        pq.read_table(_HERE / "a_diamonds_price.parquet"),
        "price",
        0.0,
        PRICE_CAP_USD,
        uniform_grid(0.0, PRICE_CAP_USD, PRICE_GRID_POINTS),
        False,
        "diamond prices (ggplot2::diamonds), n=53,940, USD clipped to [0, 20000]",
    )


def adult_income() -> LabelDataset:
    """UCI Adult: income > 50K (binary)."""
    return LabelDataset(
        "income",
        pq.read_table(_HERE / "c_adult_income.parquet"),
        "label",
        0.0,
        1.0,
        integer_grid(0, 1),
        True,
        "UCI Adult income > 50K, n=48,842, binary",
    )


LOADERS = {"weeks": weeks_worked, "prices": diamond_prices, "income": adult_income}


def load(name: str) -> LabelDataset:
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(LOADERS)}")
    return LOADERS[name]()


def synthetic_users(n: int, *, exponent: float = 1.8, most: int = 500) -> np.ndarray:
    """A user index for each of ``n`` examples, with a heavy-tailed number of examples per user
    (Zipf-like: ``P(count >= c) ≈ c^-(exponent - 1)``, capped at ``most``). The shipped datasets have
    no user IDs, so the demo and the benchmarks assign these — deterministically (counts at evenly
    spaced quantiles, examples spread by a fixed multiplicative hash), as a simulation that needs no
    random generator."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)

    def counts_for(users: int) -> np.ndarray:
        quantiles = (np.arange(users) + 0.5) / users
        return np.minimum(np.floor((1 - quantiles) ** (-1 / (exponent - 1))), most).astype(np.int64)

    users = max(1, int(n / counts_for(100_000).mean()))
    while counts_for(users).sum() < n:  # a few more users until their examples cover n
        users += max(1, users // 1000)
    counts = counts_for(users)
    owner = np.repeat(np.arange(users), counts)[:n]
    scatter = np.argsort(np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15), kind="stable")
    return np.asarray(owner[scatter], dtype=np.int64)


# -- UCI Adult with semi-sensitive features (docs/semi-sensitive.md) ------------------------------------
# Seven of the 14 columns are what an advertiser learns from cross-site behaviour and its own records
# (employment, household, money); the other seven are profile demographics a publisher holds. Bounds are
# census ranges and categories UCI's documented value lists (below), fixed in advance: nothing here is
# fitted to the rows (tests/labels_party/test_semi_sensitive_uploads.py checks the rows stay inside them).
_NUMBERS: dict[str, tuple[float, float, str]] = {
    "age": (0, 100, "linear"),
    "educational-num": (1, 16, "linear"),
    "fnlwgt": (0, 1.5e6, "log"),
    "hours-per-week": (0, 100, "linear"),
    "capital-gain": (0, 1e5, "log"),
    "capital-loss": (0, 5e3, "log"),
}
_MISSING = "?"  # UCI's marker for a value the census did not record
# the value lists of UCI's adult.names, as they are spelled in the file (declared, never read off it)
_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked", _MISSING),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces", _MISSING),
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "gender": ("Female", "Male"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
                  "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th",
                  "Preschool"),
    "native-country": ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
                       "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
                       "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
                       "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
                       "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
                       _MISSING),
}  # fmt: skip
ADULT_SEMI_SENSITIVE: tuple[str, ...] = ("workclass", "occupation", "hours-per-week", "marital-status")
ADULT_SEMI_SENSITIVE += ("relationship", "capital-gain", "capital-loss")
ADULT_NON_SENSITIVE = ("age", "gender", "race", "native-country", "education", "educational-num", "fnlwgt")


@dataclass(frozen=True)
class SemiSensitiveAdult:
    """Adult split for training with semi-sensitive features; column names as a service takes them
    (``marital_status``), IDs ``adult-0``… in file order."""

    labels: pa.Table  # example_id, label (0/1), the semi-sensitive columns: the advertiser's upload
    features: pa.Table  # example_id, the non-sensitive columns: the publisher's rows
    semi_sensitive: list[dict[str, object]]  # column declarations (a dataset spec's semi_sensitive)
    non_sensitive: list[dict[str, object]]


def _declare(name: str) -> dict[str, object]:
    key = name.replace("-", "_")
    if name in _NUMBERS:
        lo, hi, scale = _NUMBERS[name]
        return {"name": key, "kind": "number", "lo": lo, "hi": hi, "scale": scale}
    return {"name": key, "kind": "category", "categories": sorted(_CATEGORIES[name])}


def adult_semi_sensitive() -> SemiSensitiveAdult:
    data = adult_income()
    table = data.features
    ids = pa.array([f"adult-{i}" for i in range(table.num_rows)])

    def part(names: tuple[str, ...]) -> pa.Table:
        return pa.table({"example_id": ids, **{n.replace("-", "_"): table.column(n) for n in names}})

    labels = part(ADULT_SEMI_SENSITIVE)
    labels = labels.add_column(1, "label", pa.array(data.labels.astype(np.int64)))
    return SemiSensitiveAdult(
        labels,
        part(ADULT_NON_SENSITIVE),
        [_declare(n) for n in ADULT_SEMI_SENSITIVE],
        [_declare(n) for n in ADULT_NON_SENSITIVE],
    )
