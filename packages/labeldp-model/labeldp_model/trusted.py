"""The explicit list of type names a model exported by labeldp's features party may contain besides
the types skops trusts by default — exactly what ``skops.io.get_untrusted_types`` reports for the
artifacts of every model kind the service trains, never a prefix.

Load with ``skops.io.load(path, trusted=list(TRUSTED_TYPES))``, never with
``trusted=skops.io.get_untrusted_types(...)``: that trusts whatever the file names, including types
whose reconstruction runs code (``numpy.testing._private.utils.runstring``). The service loads its own
models with this same list and refuses a file naming any other type.

Per kind (scikit-learn 1.9, numpy 2.4, LightGBM 4.7, skops 0.16; tests/features_party/test_model_loading.py
trains every kind and fails when this list misses one or holds one no pipeline needs):
HistGradientBoosting keeps a partial of ``check_array`` and its trees; linear models' one-hot encoder
keeps a dtype; the last step is one of the debiasing wrappers of this package holding the release's
``BinsCorrection`` (or, for an unbiased release, ``UnbiasedRegressor`` with the labels' range);
LightGBM (trained on a Dask cluster) keeps its booster and an ordered dict.
"""

from __future__ import annotations

TRUSTED_TYPES: tuple[str, ...] = (
    "collections.OrderedDict",
    "functools.partial",
    "labeldp_model.correction.BinsCorrection",
    "labeldp_model.estimators.AffineDebiasedRegressor",
    "labeldp_model.estimators.ReleaseClassifier",
    "labeldp_model.estimators.UnbiasedRegressor",
    "lightgbm.basic.Booster",
    "lightgbm.sklearn.LGBMRegressor",
    "numpy.dtype",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.utils.validation.check_array",
)
