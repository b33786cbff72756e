"""The limits a release request must respect, checked before anything is charged.

- ε per release in [0.001, 30]: below 0.001 the labels are pure noise; above 30 every label is kept
  with probability 1 − 10⁻¹³ anyway, and the optimizer's costs, which scale with e^ε, lose the
  precision that tells bins apart (at ε ≈ 60 ties appear).
- ε₁ (the prior's part) at least 10⁻⁶ when given explicitly: the prior's noise has scale 2/ε₁.
- A user-level release's contribution bound τ in [1, 10,000] (τ·ε₂ <= ε_user, so a larger τ leaves
  each kept label less than 10⁻⁴ of the user's ε).
- An explicit ``example_ids`` list (a release or a preview) of at most 100,000 IDs: parsing 1,000,000 IDs of
  JSON cost the process ~430 MiB of memory (measured), 100,000 about 60 MiB; larger subsets: upload a
  universe.
- A dataset's support has at most 10,000 points (``labels_party.datasets.spec``).
"""

MIN_EPSILON = 0.001
MAX_EPSILON = 30.0
MIN_EPSILON_PRIOR = 1e-6
MAX_LISTED_EXAMPLES = 100_000
MAX_BOUND = 10_000
