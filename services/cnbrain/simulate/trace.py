"""Jobs of a trace: when they arrive, what they need, how long they run, where from."""

from pydantic import Field, ValidationInfo, field_validator

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.flows import Flows
from cnbrain.domain.model import DomainModel
from cnbrain.domain.request import PlacementRequest, ResourceDemand
from cnbrain.netmap.arrays import milli_to_accelerators


class TraceJob(DomainModel):
    """One job of a trace. Times are seconds from the start of the trace. Its CPU, memory
    and accelerators are the job's totals; its request asks for them as a gang of 8-accelerator
    nodes when it has more than 8, a multiple of 8 (`ResourceDemand.of_totals`). With
    `accelerator_milli`, it asks that many thousandths of one accelerator (a count of 1)."""

    id: str = Field(min_length=1)
    arrival_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    source_province: str = Field(min_length=1)
    workload_class: WorkloadClass = WorkloadClass.BATCH
    tenant: str = "default"
    cpu: float = Field(ge=0, description="CPU cores.")
    memory_gib: float = Field(ge=0)
    accelerator_model: str | None = None
    accelerator_count: int = Field(default=0, ge=0)
    accelerator_milli: int | None = Field(default=None, ge=1, lt=MILLI)
    max_latency_ms: float | None = Field(default=None, gt=0)
    min_bandwidth_gbps: float = Field(default=0.0, ge=0)
    flows: Flows | None = Field(
        default=None,
        description="What the job moves (cnbrain.domain.flows); planned by the flow "
        "simulation (cnbrain.simulate.flow_simulation); the replay with a constant bandwidth "
        "refuses a trace whose jobs state flows.",
    )

    @field_validator("accelerator_milli")
    @classmethod
    def _fraction_of_one(cls, milli: int | None, info: ValidationInfo) -> int | None:
        if milli is not None and info.data.get("accelerator_count") != 1:
            raise ValueError("a fraction of one accelerator needs accelerator_count 1")
        return milli

    @property
    def accelerators(self) -> float:
        """Its accelerators: `accelerator_count`, or the fraction of one."""
        if self.accelerator_milli is not None:
            return milli_to_accelerators(self.accelerator_milli)
        return float(self.accelerator_count)

    def to_request(self) -> PlacementRequest:
        """The placement request this job makes when it arrives."""
        resources = ResourceDemand.of_totals(
            cpu=self.cpu,
            memory_gib=self.memory_gib,
            model=self.accelerator_model,
            count=self.accelerator_count,
            milli=self.accelerator_milli,
        )
        constraints: dict[str, object] = {"min_bandwidth_gbps": self.min_bandwidth_gbps}
        if self.max_latency_ms is not None:
            constraints["max_latency_ms"] = self.max_latency_ms
        return PlacementRequest.model_validate(
            {
                "id": self.id,
                "tenant": self.tenant,
                "source_province": self.source_province,
                "resources": resources.model_dump(),
                "constraints": constraints,
                "duration_hours": self.duration_s / 3600,
                "workload_class": self.workload_class,
            }
        )
