# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A mechanism on a shipped dataset
#
# What the labels party does to one release, step by step, with nothing but `labeldp.mechanisms`:
# the public parameters, the split of ε, the private prior, the optimal bins, one randomization per
# label, and what the publisher can and cannot learn from the result. The data is the shipped
# diamond-sales dataset (53,940 prices in USD; `labeldp.samples`). Every number below comes from a fresh
# CSPRNG draw, so each run prints slightly different values; the assertions hold every time.

# %%
import numpy as np

from labeldp.mechanisms import (
    BinsNoise,
    laplace,
    normalize_counts,
    optimize_rr_on_bins,
    prior_split,
    private_prior,
    release_labels,
)
from labeldp.mechanisms.advantage import advantages
from labeldp.samples import diamond_prices

prices = diamond_prices()
labels = prices.labels
support = prices.support  # public: fixed before looking at the data
print(f"{labels.size:,} labels in [{prices.lo:g}, {prices.hi:g}] USD, a support of {support.k} points")

# %% [markdown]
# ## The public parameters
#
# The bounds (a public price cap of 20,000 USD) and the support (a grid with a 100 USD step) are fixed
# in advance, never read off the labels: rounding to the grid costs at most 50 USD per label. The
# dataset's own histogram on that support — what only the labels party could compute — is the *true*
# prior; we keep it to measure what privacy costs.

# %%
true_prior = normalize_counts(support.counts(labels))
assert support.lo == 0 and support.hi == 20_000

# %% [markdown]
# ## Split ε between the prior and the labels
#
# A release of ε spends ε₁ on a private estimate of the label distribution and ε₂ on randomizing
# the labels, with ε₁ + ε₂ ≤ ε exactly. The default ε₁ = min(ε/2, √(k/n)) shrinks as the number of
# labels grows ([choosing ε](../concepts/choosing-epsilon.md)).

# %%
epsilon = 1.0
eps_prior, eps_randomize = prior_split(epsilon, labels.size, support.k)
print(f"ε₁ = {eps_prior:.4f} for the prior, ε₂ = {eps_randomize:.4f} for the labels")
assert eps_prior + eps_randomize <= epsilon

# %% [markdown]
# ## The private prior (ε₁)
#
# The histogram on the support plus exact discrete Laplace noise of scale 2/ε₁, clipped at zero and
# normalized (the paper's Algorithm 4).

# %%
noisy_prior = private_prior(labels, support, eps_prior)
print(f"total variation from the true prior: {0.5 * np.abs(noisy_prior - true_prior).sum():.4f}")

# %% [markdown]
# ## The optimal bins (free: post-processing of the noisy prior)
#
# The partition of the support into intervals, and one output value per interval, that minimize the
# expected squared error under the noisy prior at ε₂ (the paper's Algorithm 2, solved exactly). At
# this ε it keeps few bins: randomized response over many bins would move most labels far away.

# %%
mechanism = optimize_rr_on_bins(support, noisy_prior, eps_randomize, "squared")
print(f"{mechanism.m} bins:", [f"{lo:,.0f}–{hi:,.0f}" for lo, hi in mechanism.bin_edges])
print("their values:", np.round(mechanism.bin_values, 1))
assert mechanism.implemented_epsilon <= eps_randomize  # the integer thresholds never overspend

# %% [markdown]
# How good is it? Its expected error under the *true* prior, beside the mechanism the labels party
# would choose if the true prior were public — the price of estimating the prior privately — and
# beside predicting the mean price for everyone.

# %%
values = support.values
rmse_private = np.sqrt(mechanism.expected_loss(values, true_prior))
oracle = optimize_rr_on_bins(support, true_prior, epsilon, "squared")
rmse_oracle = np.sqrt(oracle.expected_loss(values, true_prior))
rmse_mean = np.sqrt(np.sum(true_prior * (values - np.sum(true_prior * values)) ** 2))
print(f"RMSE per label: {rmse_private:,.0f}")
print(
    f"with the true prior public and the whole ε: {rmse_oracle:,.0f}; predicting the mean: {rmse_mean:,.0f}"
)
assert rmse_oracle <= rmse_private * (1 + 1e-9)

# %% [markdown]
# ## One randomization per label (ε₂)
#
# Each label's bin is kept with probability `e^ε₂ / (e^ε₂ + m − 1)` and otherwise moved to one of the
# other bins uniformly. The transition matrix is exact — it is what the integer sampler draws — and the
# realized outputs follow it.

# %%
bins = mechanism.randomize(labels)
true_bins = mechanism.bin_of(labels)
noise = BinsNoise.of(mechanism.bin_values, eps_randomize)
kept = float(np.mean(bins == true_bins))
print(f"kept {kept:.3%} of the labels' bins (exact probability {noise.keep:.3%})")
assert abs(kept - noise.keep) < 0.02

# %% [markdown]
# `release_labels` does all of the above in one call, and `published()` is what travels to the
# publisher with the noisy labels: the bins, their values, the ε split and the noisy prior. Named here:
# without `mechanism`, a release of these prices at this ε gets the default — the unbiased randomizer,
# which trains the publisher's model better from ε₂ = 0.2 (docs/concepts/mechanism.md).

# %%
release = release_labels(labels, support, epsilon, "squared", mechanism="rr_on_bins")
published = release.published()
print(published.kind, published.epsilon_prior, published.epsilon_randomize, published.bin_values)

# %% [markdown]
# ## What the publisher can do with it
#
# The noisy values are biased towards the middle bins: `E[ŷ_o | y] = a·Φ(y) + b·Σ_j ŷ_j`. The publisher
# undoes that in aggregate (and in its model, by the same affine map): the debiased mean of the noisy
# values estimates the mean of the binned true prices.

# %%
noisy_values = release.noisy_labels
noise = BinsNoise.of_published(published)
debiased_mean = float(noise.affine_correct(np.array([noisy_values.mean()]))[0])
release_bins = np.asarray(published.support_bins)[support.snap(labels)]  # each label's own bin
binned_mean = float(np.asarray(published.bin_values)[release_bins].mean())
print(f"mean of the noisy values {noisy_values.mean():,.0f}, debiased {debiased_mean:,.0f}")
print(f"mean of the binned true prices {binned_mean:,.0f}")
assert abs(debiased_mean - binned_mean) < 0.05 * binned_mean

# %% [markdown]
# Laplace noise at the same ε, on the raw price (sensitivity: the whole 20,000 USD range), is the
# obvious alternative. Per label it is far worse:

# %%
laplace_values = laplace(labels, prices.lo, prices.hi, epsilon)
rmse_rr = np.sqrt(np.mean((noisy_values - labels) ** 2))
rmse_laplace = np.sqrt(np.mean((laplace_values - labels) ** 2))
print(f"realized RMSE per label: RR-on-Bins {rmse_rr:,.0f}, Laplace {rmse_laplace:,.0f}")
assert rmse_rr < rmse_laplace

# %% [markdown]
# ## What an attacker learns
#
# The best attacker who knows the mechanism and believes the noisy prior guesses each label's bin.
# Its exact additive advantage (how much more often it is right after seeing the release) is never
# more than the worst case every release states, and its multiplicative advantage never more than
# the implemented ε ([privacy audits](../concepts/audits.md)).

# %%
audit = advantages(published, published.prior).summary()
print(f"right {audit['success_without_mean']:.3f} → {audit['success_with_mean']:.3f} of the time")
print(
    f"additive advantage {audit['additive_mean']:.3f}, at most {published.worst_case_additive_advantage:.3f}"
)
assert audit["additive_max"] <= published.worst_case_additive_advantage + 1e-12
assert audit["multiplicative_max"] <= published.implemented_epsilon + 1e-9
