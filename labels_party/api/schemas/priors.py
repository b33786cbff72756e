"""Bodies of ``/v1/datasets/{id}/priors`` and ``/v1/priors``: priors a features party signed for a
dataset's examples (feature-aware releases)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt

from labeldp.common.inputs import ExampleId, Integral, Name
from labeldp.mechanisms import LossName
from labeldp.priors import MAX_GROUPS
from labels_party.priors import DEFAULT_MAX_GROUPS, PriorsDetail, PriorsRequest
from labels_party.releases.limits import MAX_LISTED_EXAMPLES
from labels_party.storage.orm import Priors


class PriorsIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={"examples": [{"recipient": "publisher", "max_groups": 64}]},
    )

    recipient: Name = Field(description="name of a registered recipient (features party) whose key is pinned")
    max_groups: Annotated[StrictInt, Integral] = Field(
        DEFAULT_MAX_GROUPS,
        ge=1,
        le=MAX_GROUPS,
        description="G: the most groups the answer may have (max_groups × support points ≤ 262,144)",
    )
    loss: LossName | None = Field(
        None,
        description="the loss of the release the priors are for (it decides the support: zero_one prices "
        "classes); default: squared, or zero_one for categorical labels",
    )
    example_ids: list[ExampleId] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LISTED_EXAMPLES,
        description="price only these IDs (default: every example a release of the dataset lists — its "
        "universe, else its labelled examples)",
    )

    def request(self) -> PriorsRequest:
        return PriorsRequest(self.recipient, self.max_groups, self.loss, self.example_ids)


class PriorsOut(BaseModel):
    id: str
    dataset_id: str
    recipient_id: str
    features_priors_id: str = Field(
        description="the features party's id of its answer (its GET /v1/pricings)"
    )
    model_id: str = Field(description="the features party's model that priced the examples")
    rule: str = Field(description="the public grouping rule, as the features party signed it")
    loss: str
    groups: int = Field(description="G: group priors stored")
    max_groups: int
    support_k: int
    examples_requested: int
    examples_priced: int = Field(description="of them, given a group (the others have no feature row there)")
    message_sha256: str = Field(description="SHA-256 of the signed answer's frames, as received and kept")
    created_at: AwareDatetime

    @classmethod
    def of(cls, p: Priors) -> PriorsOut:
        return cls.model_validate(p, from_attributes=True)


class GroupPriorOut(BaseModel):
    group: int
    examples: int = Field(description="requested examples in this group")
    masses: list[float] = Field(description="the group's prior on the support, normalized")


class PriorsDetailOut(PriorsOut):
    support: list[float]
    examples_without_group: int = Field(description="requested examples the features party could not price")
    group_priors: list[GroupPriorOut]

    @classmethod
    def of_detail(cls, d: PriorsDetail) -> PriorsDetailOut:
        base = PriorsOut.of(d.row).model_dump()
        groups = [
            GroupPriorOut(group=g, examples=size, masses=masses)
            for g, (size, masses) in enumerate(zip(d.sizes, d.priors, strict=True))
        ]
        return cls(
            **base, support=list(d.support), examples_without_group=d.without_group, group_priors=groups
        )
