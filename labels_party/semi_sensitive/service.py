"""Training with semi-sensitive features at the labels party, in the order the invariants require.

0. **What the request alone decides**, first: its δ against what the tenant's δ budget has left, its
   ε₂ against the per-example budget (``_affordable``; 409, in milliseconds). Calibrating σ takes
   seconds of CPU, and a request that can never be paid must not cost them: 8 requests over the δ
   left, ε varied so that no cache helped, took 41 s of server CPU for their 409s and slowed another
   tenant's reads from 45 to 252 ms.
1. **Plan** (``plan.py``; nothing charged, nothing drawn, no transaction held): the dataset declares
   semi-sensitive and non-sensitive columns and has binary labels; the label release (phase 1) is
   this dataset's, complete, and lists only labelled examples; every one of its examples has a labels
   row and a non-sensitive row; the noise multiplier for (ε₂, δ) and the schedule is calibrated — a
   request that cannot be met is refused here.
2. **Charge**: the model row and the (ε₂ per example, δ) charge commit in one transaction — the path
   every charged job takes (``budget/charged_work.py``): tenant lock first, the segment store always.
3. **Work** (``train.py``; draws only from here on), under the process's lease: the truncated model
   learns from the release's noisy labels (post-processing), DP-SGD continues on every column, and the
   signed model message is written. A failure after the charge, or a crash (recovery), keeps it (status
   ``failed``): noise may have been drawn.

Only the weights leave: the message's guarantee covers every example's label and semi-sensitive
features (docs/semi-sensitive.md).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.common.files import write_bytes_atomic
from labeldp.common.instance import Instance
from labeldp.mechanisms import ParameterError
from labels_party.budget.charged_work import ChargedWork
from labels_party.budget.epsilon import as_float, to_atto, to_micro
from labels_party.budget.errors import DeltaBudgetExhaustedError
from labels_party.budget.idempotency import Fingerprint
from labels_party.budget.ledger import Charging, Ledger, UserCharge
from labels_party.budget.ledger_keys import distinct
from labels_party.delivery.message import Signer
from labels_party.semi_sensitive.plan import (
    MAX_STEPS,
    MAX_TRAINING_EXAMPLES,
    ModelPlan,
    SemiSensitiveRequest,
    labelled_examples,
    plan_model,
)
from labels_party.semi_sensitive.train import train_and_sign
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import SemiSensitiveModel, Tenant

if TYPE_CHECKING:  # the optional dpsgd extra
    from labeldp.semi_sensitive import HybridPlan

log = logging.getLogger("labeldp.labels.semi_sensitive")


class SemiSensitiveService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: DataDir,
        signer: Signer,
        ledger: Ledger,
        instance: Instance,
        lease_seconds: float,
        on_charged: Callable[[str], None] = lambda _tenant: None,
    ) -> None:
        self.sessions, self.data_dir, self.signer = sessions, data_dir, signer
        self.jobs = ChargedWork(
            ledger,
            SemiSensitiveModel,
            instance,
            lease_seconds,
            name="model",
            remove_outputs=self.remove_outputs,
            on_charged=on_charged,
        )

    def get(self, tenant_id: str, model_id: str) -> SemiSensitiveModel:
        with self.sessions() as session:
            return owned(session, SemiSensitiveModel, model_id, tenant_id, "model")

    def message(self, tenant_id: str, model_id: str) -> bytes:
        model = self.get(tenant_id, model_id)
        if model.status != "complete":
            raise DomainError("model-not-complete", f"the model is {model.status}", status=409)
        return self.data_dir.model_message(model.id).read_bytes()

    def plan(
        self, tenant_id: str, dataset_id: str, epsilon: float, delta: float, epochs: float, batch_size: int
    ) -> tuple[HybridPlan, int]:
        """The public plan for a total (ε, δ) on this dataset's labelled examples, and their number:
        whether the label phase pays for its ε (``labeldp.semi_sensitive.plan``). Free: it reads the
        dataset's declared columns and its number of labelled examples only, and draws nothing."""
        try:
            from labeldp.semi_sensitive import DpSgdSchedule, plan_hybrid
        except ImportError as exc:  # the optional extra
            raise DomainError(
                "dpsgd-unavailable", "training with semi-sensitive features needs labeldp[dpsgd]", status=501
            ) from exc
        n = labelled_examples(self.sessions, self.data_dir, tenant_id, dataset_id)
        if n > MAX_TRAINING_EXAMPLES:  # the limits a model request has, so the plan is as cheap as one
            raise DomainError("too-many-examples", f"at most {MAX_TRAINING_EXAMPLES} examples train here")
        try:
            if DpSgdSchedule.of(n, batch_size, epochs).steps > MAX_STEPS:
                raise ParameterError(f"at most {MAX_STEPS} DP-SGD steps", "epochs")
            return plan_hybrid(epsilon, delta, n, batch_size, epochs), n
        except ParameterError as exc:
            raise DomainError("invalid-parameter", str(exc)) from exc

    def remove_outputs(self, model_id: str) -> None:
        self.data_dir.model_message(model_id).unlink(missing_ok=True)

    def create(
        self, tenant_id: str, api_key_id: str | None, dataset_id: str, request: SemiSensitiveRequest, key: str
    ) -> tuple[SemiSensitiveModel, bool]:
        """The model and whether it was trained now (False: an idempotent replay)."""
        fingerprint = request.fingerprint(dataset_id)
        existing = self.jobs.find(tenant_id, key, fingerprint)
        if existing is not None:
            return existing, False
        self._affordable(tenant_id, request)
        plan = plan_model(self.sessions, self.data_dir, tenant_id, dataset_id, request)
        row, created = self._charge(tenant_id, api_key_id, dataset_id, key, fingerprint, request, plan)
        if not created:  # lost the race for this Idempotency-Key
            return row, False
        # Charged and committed: from here on the budget is spent whatever happens.
        return self.jobs.run(row.id, lambda: self._work(row, request, plan)), True

    def _affordable(self, tenant_id: str, request: SemiSensitiveRequest) -> None:
        """Refuse (409) a request the tenant's budgets cannot pay whatever the dataset holds: the charge
        takes at least its δ (group privacy only adds) from the tenant's δ, and ε₂ from every training
        example's budget. The charge checks both again, exactly, under the tenant's lock."""
        with self.sessions() as session:
            tenant = session.get(Tenant, tenant_id)
            assert tenant is not None  # the caller's own
            spent, budget, per_example = (
                tenant.delta_spent_atto,
                tenant.delta_budget_atto,
                tenant.budget_micro,
            )
        delta = to_atto(request.delta)
        if spent + delta > budget:
            raise DeltaBudgetExhaustedError(delta, spent, budget)
        if to_micro(request.epsilon_dpsgd) > per_example:
            raise DomainError(
                "budget-exhausted",
                f"ε₂ = {request.epsilon_dpsgd:g} is more than the per-example budget "
                f"{as_float(per_example):g}",
                status=409,
                epsilon_requested=request.epsilon_dpsgd,
                per_example_budget=as_float(per_example),
            )

    def _charge(
        self,
        tenant_id: str,
        api_key_id: str | None,
        dataset_id: str,
        key: str,
        fingerprint: Fingerprint,
        request: SemiSensitiveRequest,
        plan: ModelPlan,
    ) -> tuple[SemiSensitiveModel, bool]:
        """Insert the model row and charge (ε₂, δ) to every training example in one transaction."""
        row = SemiSensitiveModel(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            label_release_id=plan.release.id if plan.release is not None else None,
            recipient_id=plan.recipient.id,
            idempotency_key=key,
            status="charged",
            examples=len(plan.example_ids),
            epsilon_dpsgd_micro=plan.epsilon_micro,
            delta_atto=to_atto(plan.delta_charged),
            noise_multiplier=plan.noise_multiplier,
            sampling_rate=plan.schedule.sampling_rate,
            steps=plan.schedule.steps,
            clip_norm=request.clip_norm,
            api_key_id=api_key_id,
        )
        self.jobs.stamp(row, fingerprint)
        keys = distinct(plan.example_keys)
        # every user pays ε₂ for each of its training examples (group privacy), as label releases charge
        users = UserCharge.of_examples(plan.user_keys, row.epsilon_dpsgd_micro)
        user_delta = max(plan.user_delta_atto(), row.delta_atto)

        def charge(ledger: Charging, model: SemiSensitiveModel) -> None:
            entry = ledger.charge(
                keys,
                model.epsilon_dpsgd_micro,
                release_id=model.id,
                api_key_id=api_key_id,
                users=users,
                note="semi-sensitive model: DP-SGD phase",
                delta_atto=model.delta_atto,
                user_delta_atto=user_delta,
            )
            model.delta_atto = entry.delta_atto or model.delta_atto  # per user when per-user budgets apply

        return self.jobs.admit(row, charge)

    def _work(
        self, row: SemiSensitiveModel, request: SemiSensitiveRequest, plan: ModelPlan
    ) -> dict[str, object]:
        """Train (every draw happens here, after the charge committed) and write the signed message;
        the model's columns on completion."""
        raw = train_and_sign(row, request, plan, self.signer)
        write_bytes_atomic(self.data_dir.model_message(row.id), raw)
        return {"message_sha256": hashlib.sha256(raw).hexdigest()}
