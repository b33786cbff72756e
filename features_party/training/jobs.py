"""The body of a training job, and how its model is saved and loaded.

A model is the fitted scikit-learn ``Pipeline`` saved with skops (never pickle) as ``model.skops`` —
the exported artifact, which loads with scikit-learn, skops, pandas and the small ``labeldp_model``
package alone — plus a JSON file with what the API needs besides (the raw feature columns and
which are categorical, the release's published mechanism, the metrics). Loading trusts, besides the
types skops trusts by default, exactly the type names in ``MODEL_TYPES`` — never a prefix: a file
that names any other type (``numpy.testing._private.utils.runstring`` executes code when skops
reconstructs it) is refused before skops builds anything (409 ``model-not-loadable``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from features_party.receiver.store import group_mechanisms, grouping, published_mechanism, release_schema
from features_party.storage.data_dir import DataDir
from features_party.storage.orm import FeatureTable, ReceivedRelease, TrainingJob
from features_party.training.fit import (
    Debias,
    Trained,
    TrainedClassifier,
    TrainingError,
    fit,
    fit_classifier,
)
from labeldp import __version__
from labeldp.common.db import utcnow
from labeldp.common.errors import DomainError
from labeldp.mechanisms import BinsNoise, GroupedNoise, PublishedMechanism
from labeldp.mechanisms.debias import ReleaseNoise, release_noise
from labeldp.scale import DaskEngine
from labeldp_model import TRUSTED_TYPES

# The types the service's own pipelines contain that skops does not trust by default, by name (never a
# prefix): ``labeldp_model.TRUSTED_TYPES``, kept beside the classes an exported model needs so that a
# notebook loads with the very list the service loads with. tests/features_party/test_model_loading.py
# trains every model kind and fails if the list misses a type or holds one no pipeline needs.
MODEL_TYPES: tuple[str, ...] = TRUSTED_TYPES
# 1: a bare estimator with the encoding in meta.json (before models were exportable pipelines);
# 2: a pipeline ending in labeldp's own wrappers (labeldp.mechanisms.estimators), loadable only with
# labeldp installed; 3: the wrappers and their correction from labeldp_model
MODEL_FORMAT = 3
RETRAIN = {
    None: "this model was saved before models were exportable pipelines; train it again",
    1: "this model was saved before models were exportable pipelines; train it again",
    2: "this model was saved before its debiasing step moved to the labeldp-model package (an artifact "
    "that loads without labeldp); train it again",
}
ARTIFACT = "model.skops"


def is_classification(mechanism: PublishedMechanism) -> bool:
    """Classes (RR-Top-k) train a classifier; RR-on-Bins a regressor with the release's loss."""
    return mechanism.kind == "rr_top_k"


def _skops() -> Any:
    """skops, imported when a model is saved or loaded: importing it imports every scikit-learn module
    (~250 MiB), which a receiver that has not trained yet should not hold."""
    import skops.io

    return skops.io


def save(trained: Trained, mechanism: PublishedMechanism, directory: Path) -> None:
    sio = _skops()
    directory.mkdir(parents=True, exist_ok=True)
    sio.dump(trained.model, directory / ARTIFACT)
    meta = {
        "format": MODEL_FORMAT,
        "columns": trained.columns,
        "categorical": trained.categorical,
        "mechanism": mechanism.model_dump(mode="json"),
        "loss": trained.loss,
        "debias": trained.debias,
        "metrics": trained.metrics,
        "classifier": isinstance(trained, TrainedClassifier),
    }
    (directory / "meta.json").write_text(json.dumps(meta))


def load(directory: Path) -> Trained:
    meta = json.loads((directory / "meta.json").read_text())
    saved = meta.get("format")
    if saved != MODEL_FORMAT:
        message = RETRAIN.get(
            saved, f"this model was saved in format {saved!r}, not {MODEL_FORMAT}; train it again"
        )
        raise DomainError("model-needs-retraining", message, status=409)
    path = directory / ARTIFACT
    sio = _skops()
    try:
        foreign = sorted(set(sio.get_untrusted_types(file=path)) - set(MODEL_TYPES))
        if foreign:
            raise DomainError(
                "model-not-loadable",
                f"the model file names types this service never writes, so it is not loaded: {foreign[:5]}",
                status=409,
            )
        model = sio.load(path, trusted=list(MODEL_TYPES))  # skops checks again, before building anything
    except DomainError:
        raise
    except Exception as exc:  # a file skops cannot read (corrupt, or from an incompatible version)
        raise DomainError(
            "model-not-loadable", f"the model file cannot be loaded: {type(exc).__name__}", status=409
        ) from exc
    noise = release_noise(PublishedMechanism.model_validate(meta["mechanism"]))
    kind = TrainedClassifier if meta.get("classifier") else Trained
    return kind(
        model, meta["columns"], meta["categorical"], noise, meta["loss"], meta["debias"], meta["metrics"]
    )


def provenance(
    release: ReceivedRelease, mechanism: PublishedMechanism, table: FeatureTable
) -> dict[str, Any]:
    header = release.summary
    return {
        "release_id": release.release_id,
        "sender_id": release.sender_id,
        "epsilon_total": mechanism.epsilon,
        "epsilon_prior": mechanism.epsilon_prior,
        "epsilon_randomize": mechanism.epsilon_randomize,
        "mechanism": mechanism.model_dump(mode="json"),
        "priors_id": grouping(release)[0],
        "group_count": grouping(release)[1],
        "label_type": header.get("label_type"),
        "feature_table": table.name,
        "feature_table_id": table.id,
        "feature_table_version": table.version,
        "code_version": __version__,
    }


def combined(first: ReceivedRelease, others: list[ReceivedRelease]) -> tuple[pa.Table, GroupedNoise]:
    """Several releases as one grouped release (``GroupedNoise``): every mechanism of every release in
    one list — the first release's groups, then each other release's groups and its own mechanism —
    each row indexed by the mechanism that released it (the first release's rows without a group: -1,
    its own); rows of the other releases that carry no label information (over a user-level bound)
    are left out here, the first's by ``join_informative`` as always."""
    mechanisms: list[PublishedMechanism] = []
    pieces: list[pa.Table] = []
    for i, release in enumerate([first, *others]):
        own, groups = published_mechanism(release), group_mechanisms(release)
        table = pq.read_table(release.path).cast(release_schema(bool(groups)))
        bins = np.asarray(table.column("bin").to_numpy(), dtype=np.int64)
        group = (
            np.asarray(table.column("group").to_numpy(), dtype=np.int64)
            if groups
            else np.full(table.num_rows, -1, dtype=np.int64)
        )
        offset = len(mechanisms)
        mechanisms.extend(groups)
        if i == 0:
            index = np.where(group >= 0, offset + group, -1)
        else:
            mechanisms.append(own)
            informative = (group >= 0) | (bins < own.m)
            index = np.where(group >= 0, offset + group, len(mechanisms) - 1)[informative]
            table, bins = table.filter(pa.array(informative)), bins[informative]
        pieces.append(
            pa.table(
                {
                    "example_id": table.column("example_id"),
                    "bin": pa.array(bins, pa.uint16()),
                    "group": pa.array(index, pa.int16()),
                }
            )
        )
    noise = GroupedNoise.of_published(published_mechanism(first), tuple(mechanisms))
    return pa.concat_tables(pieces), noise


def _fit_on_cluster(
    scheduler: str, release_file: str, feature_file: Path, job: TrainingJob, schema: dict[str, str],
    noise: ReleaseNoise, loss: str, groups: GroupedNoise | None,
) -> Trained:  # fmt: skip
    from features_party.training.distributed import fit_on_cluster

    engine = DaskEngine(scheduler)
    try:
        return fit_on_cluster(
            engine.client, release_file, str(feature_file), schema, noise, loss,
            debias=cast(Debias, job.debias), validation_fraction=job.validation_fraction, groups=groups,
        )  # fmt: skip
    finally:
        engine.close()


def _also(sessions: sessionmaker[Session], job: TrainingJob) -> list[ReceivedRelease]:
    """The other releases a job trains on (``also_release_ids``), as they were checked when it was
    accepted; one deleted since fails the job."""
    ids = [str(r) for r in cast(list[object], job.provenance.get("also_release_ids") or [])]
    with sessions() as s:
        found = [s.get(ReceivedRelease, r) for r in ids]
    missing = [r for r, row in zip(ids, found, strict=True) if row is None]
    if missing:
        raise TrainingError(f"release {missing[0]} is no longer stored")
    return [row for row in found if row is not None]


def run(sessions: sessionmaker[Session], data_dir: DataDir, job_id: str, scheduler: str | None = None) -> str:
    """The job body: never raises; a failure is kept on the job with its error. Returns the final
    status (``succeeded`` or ``failed``)."""
    started = time.monotonic()

    def progress(**values: Any) -> None:
        with sessions.begin() as s:
            s.execute(update(TrainingJob).where(TrainingJob.id == job_id).values(**values))

    try:
        with sessions() as s:
            job = s.get(TrainingJob, job_id)
            assert job is not None
            release = s.get(ReceivedRelease, job.release_id)
            table = s.get(FeatureTable, job.provenance["feature_table_id"])
            assert release is not None and table is not None
        progress(status="running", progress={"stage": "loading", "elapsed_s": 0.0})
        mechanism = published_mechanism(release)
        noise = release_noise(mechanism)
        group_list = group_mechanisms(release)
        groups = GroupedNoise.of_published(mechanism, group_list) if group_list else None
        also = _also(sessions, job)
        released_table: pa.Table | None = None
        if also:
            released_table, groups = combined(release, also)
        feature_file = data_dir.table(table.id, job.feature_table_version)
        # two counts, each with one meaning from start to end: the release's examples, and the examples
        # the model fits on (those the join finds, less the validation split), known once fitting runs
        released_examples = (
            pq.ParquetFile(release.path).metadata.num_rows
            if released_table is None
            else released_table.num_rows
        )
        progress(
            progress={
                "stage": "fitting",
                "release_examples": released_examples,
                "elapsed_s": time.monotonic() - started,
            }
        )

        def report(values: dict[str, float]) -> None:
            progress(progress={"stage": "fitting", "release_examples": released_examples, **values})

        options: dict[str, Any] = {
            "model": job.kind,
            "debias": job.debias,
            "validation_fraction": job.validation_fraction,
            "progress": report,
        }
        if job.kind == "lightgbm":  # the workers read both files; nothing is loaded here
            assert scheduler is not None  # checked when the job was accepted
            trained: Trained = _fit_on_cluster(
                scheduler, release.path, feature_file, job, table.schema, noise, mechanism.loss, groups
            )
        else:
            features = pq.read_table(feature_file)
            released = (
                pq.read_table(release.path).cast(release_schema(groups is not None))
                if released_table is None
                else released_table
            )
            if is_classification(mechanism):
                assert isinstance(noise, BinsNoise)  # classes are released by RR-Top-k or RR-on-Bins
                trained = fit_classifier(released, features, table.schema, noise, **options)
            else:
                trained = fit(
                    released, features, table.schema, noise, mechanism.loss, groups=groups, **options
                )
        # what a loss against the bins leaves out: how far the bins are from the labels (noisy prior)
        trained.metrics["release_binning_loss_under_noisy_prior"] = mechanism.binning_loss_under_prior()
        save(trained, mechanism, data_dir.model(job_id))
        final = trained.model[-1]
        iterations = int(getattr(getattr(final, "estimator", final), "n_iter_", 0) or 0)
        progress(
            status="succeeded",
            debias=trained.debias,  # as applied: none for an unbiased release, whatever was asked
            metrics=trained.metrics,
            progress={
                "stage": "done",
                "release_examples": released_examples,
                "training_examples": trained.metrics["train_examples"],
                "iterations": iterations,
                "iterations_total": iterations,
                "elapsed_s": time.monotonic() - started,
            },
            finished_at=utcnow(),
        )
        return "succeeded"
    except Exception as exc:
        progress(
            status="failed",
            error=f"{type(exc).__name__}: {exc}"[:2000],
            progress={"stage": "failed", "elapsed_s": time.monotonic() - started},
            finished_at=utcnow(),
        )
        return "failed"
