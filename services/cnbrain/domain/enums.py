"""Closed vocabularies of the domain."""

from enum import StrEnum


class SiteKind(StrEnum):
    """What a data-center site is, which decides who may be placed on it."""

    HUB = "hub"
    PROVINCIAL = "provincial"
    EDGE = "edge"
    IDLE = "idle"


class CpuArch(StrEnum):
    X86_64 = "x86_64"
    AARCH64 = "aarch64"


class Interconnect(StrEnum):
    """Accelerator interconnect of a site; `rank` orders them from weakest to strongest."""

    ETHERNET = "ethernet"
    ROCE = "roce"
    IB = "ib"

    @property
    def rank(self) -> int:
        return _INTERCONNECT_RANK[self]


_INTERCONNECT_RANK = {Interconnect.ETHERNET: 0, Interconnect.ROCE: 1, Interconnect.IB: 2}


class LinkLayer(StrEnum):
    """Access links attach users, province links stay inside a province, backbone links join
    provinces' gateways."""

    ACCESS = "access"
    PROVINCE = "province"
    BACKBONE = "backbone"


class NodeRole(StrEnum):
    GATEWAY = "gateway"
    BACKBONE = "backbone"
    AGGREGATION = "aggregation"
    ACCESS = "access"
    SITE = "site"


class WorkloadClass(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"
    SERVICE = "service"


class Objective(StrEnum):
    """The objective terms a request can weight."""

    COST = "cost"
    LATENCY = "latency"
    ENERGY = "energy"
    BALANCE = "balance"


OBJECTIVES: tuple[Objective, ...] = tuple(Objective)
