"""A model's metrics as the CLI prints them: a readable name and the unit of each value.

The service keeps the metrics under stable machine names (``validation_loss_vs_noisy_labels``), which
scripts read with ``--json``; people read a name and a unit. The losses are in the release's loss: for
squared loss a mean of squared label units, shown with its root (in label units, comparable to an RMSE);
for absolute loss in label units; Poisson's log loss has none. The console names them alike
(``labeldp/console/static/features/models.js``).
"""

from __future__ import annotations

from collections.abc import Mapping

from labeldp.terminal import cell, number, table_lines

NAMES = {
    "train_examples": "training examples",
    "validation_examples": "validation examples",
    "examples_capped": "examples over the contribution bound (left out)",
    "validation_loss_vs_noisy_labels": "validation loss against the noisy labels",
    "validation_loss_vs_binned_true_labels_unbiased": (
        "validation loss against the binned true labels (unbiased estimate)"
    ),
    "validation_loss_vs_binned_true_labels_unbiased_se": "standard error of that estimate",
    "validation_error_vs_noisy_labels": "validation error against the noisy labels",
    "validation_error_vs_true_labels_unbiased": (
        "validation error against the true labels (unbiased estimate)"
    ),
    "release_binning_loss_under_noisy_prior": "loss of binning the labels (under the noisy prior)",
}


LOSS_UNITS = {
    "squared": "mean squared error, label units²",
    "absolute": "mean absolute error, label units",
    "poisson": "mean Poisson log loss ŷ − y·log ŷ",
}


def value_with_unit(name: str, value: object, loss: str) -> str:
    """One metric's value as people read it, with its unit."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return cell(value)
    if name.endswith("_examples") or name == "examples_capped":
        return f"{int(value):,}"
    if name.startswith("validation_error"):
        return f"{100 * value:.2f}% of examples"
    if loss not in LOSS_UNITS:
        return cell(value)
    # the root of a squared error is in label units, as an RMSE (an unbiased estimate can be < 0)
    square = loss == "squared" and value >= 0 and not name.endswith("_se")  # an error's root: no unit
    root = f"; root {number(value**0.5)} label units" if square else ""
    return f"{number(value)} ({LOSS_UNITS[loss]}{root})"


def metric_lines(metrics: Mapping[str, object], loss: str) -> list[str]:
    """A model's metrics, one a line: the readable name, then the value and its unit (a metric this
    version does not know keeps its machine name)."""
    rows = [
        {"name": NAMES.get(k, k.replace("_", " ")), "value": value_with_unit(k, v, loss)}
        for k, v in metrics.items()
    ]
    return ["  " + line for line in table_lines(rows, ("name", "value"), headers=("", ""))]
