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
# # Two classes: the corrected cross-entropy on Adult
#
# A binary release (RR-Top-k over the Adult census's income classes, ε = 2) randomizes each label's
# class: a network trained with the ordinary cross-entropy on the released classes learns the
# probability of the *released* class, `q = b + a·p`, squeezed towards ½. `ReleaseLoss(release, "bce")`
# is the forward correction: it carries the network's probability `p` through the release before the
# cross-entropy, so the network learns `p` itself.
#
# The release is made here with the library, as the advertiser's service makes it, and described as
# the features party's export describes it (`GET /v1/releases/{id}/training-set` carries this
# description in its metadata; [the diamond prices example](bring_your_own_trainer.md) runs the
# services).

# %%
import numpy as np
import pandas as pd
import torch
from sklearn.metrics import log_loss, roc_auc_score

from features_party.exports.description import correction
from labeldp.mechanisms import optimize_rr_top_k
from labeldp.samples import adult_income
from labeldp_model import Release
from labeldp_model.pytorch import ReleaseLoss
from labeldp_model.release import FORMAT, FORMAT_VERSION

torch.set_num_threads(1)  # networks this small train fastest on one thread (more only wait for each other)
adult = adult_income()
labels = np.asarray(adult.labels, dtype=np.int64)
frame = pd.get_dummies(adult.features.to_pandas(), dtype=float)
X = ((frame - frame.mean()) / frame.std().replace(0, 1)).to_numpy(np.float32)
test = np.arange(len(labels)) % 5 == 4
prior = np.bincount(labels[~test], minlength=2) / (~test).sum()  # the advertiser's (a noisy one in a release)
mechanism = optimize_rr_top_k(prior, 2.0)  # at ε = 1 it reports the majority class alone
released_bins = mechanism.randomize(labels[~test])  # the service's CSPRNG
published = mechanism.describe(prior=prior, epsilon_prior=0.1)
release = Release.from_description(
    {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "release_id": "adult-example",
        "columns": {"released_value": "released_value"},
        "mechanism": published.model_dump(mode="json"),
        "correction": correction(published),
    }
)
released = np.asarray(published.bin_values)[released_bins]  # the released_value column
print(
    f"keep {release.correction.keep:.3f}, move {release.correction.move:.3f}; "
    f"{released.mean():.3f} of the released classes are 1, {labels[~test].mean():.3f} of the true ones"
)

# %% [markdown]
# ## The same network, two losses


# %%
def train(criterion: torch.nn.Module) -> np.ndarray:
    torch.manual_seed(0)  # the network's initialisation
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    Xt, yt = torch.tensor(X[~test]), torch.tensor(released, dtype=torch.float32)
    for _ in range(8):
        for batch in torch.split(torch.randperm(len(Xt)), 256):
            optimizer.zero_grad()
            criterion(net(Xt[batch]).squeeze(-1), yt[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        return torch.sigmoid(net(torch.tensor(X[test])).squeeze(-1)).numpy().astype(np.float64)


results = {}
for name, criterion in (
    ("corrected (ReleaseLoss, bce)", ReleaseLoss(release, "bce")),
    ("uncorrected (BCEWithLogitsLoss)", torch.nn.BCEWithLogitsLoss()),
):
    p = train(criterion)
    results[name] = {
        "log loss vs true labels": log_loss(labels[test], p),
        "AUC": roc_auc_score(labels[test], p),
        "mean P(income > 50K)": p.mean(),
    }
print(pd.DataFrame(results).T.round(3).to_string())
print(f"true share of income > 50K in the test rows: {labels[test].mean():.3f}")

# %% [markdown]
# The ranking (AUC) is nearly the same — the released probability is a monotone map of the true one —
# but the uncorrected network's probabilities are squeezed towards ½ and its log loss against the true
# labels is worse; the corrected one is calibrated to the true classes.

# %%
corrected, plain = results["corrected (ReleaseLoss, bce)"], results["uncorrected (BCEWithLogitsLoss)"]
assert corrected["log loss vs true labels"] < plain["log loss vs true labels"]
assert abs(corrected["mean P(income > 50K)"] - labels[test].mean()) < abs(
    plain["mean P(income > 50K)"] - labels[test].mean()
)
