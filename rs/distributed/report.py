"""What a Ray run did, per step (the numbers the command prints and the stage report keeps), and why one cannot run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rs.errors import RsError, UsageError
from rs.pipeline.recover import RecoveryReport
from rs.pipeline.sample import SampleReport

RAY_MISSING = "Ray is not installed: pip install 'rs[ray]'"


class RayNotInstalled(UsageError, RuntimeError):
    def __init__(self) -> None:
        super().__init__(RAY_MISSING)


class RayPlanError(UsageError, ValueError):
    """A run this cluster or this family cannot do: not the vllm engine, more replicas than the cluster holds,
    a cluster this machine cannot reach or is not authorised to join."""


class RayIncomplete(RsError, RuntimeError):
    """Some requests failed in a failed engine or were not cacheable: re-run to send only what is missing."""

    def __init__(self, run: "RayRun"):
        self.run = run
        lost = {
            name: (s.failed_requests, s.uncached) for name, s in run.steps.items() if s.failed_requests or s.uncached
        }
        super().__init__(
            "the Ray run is incomplete: "
            + ", ".join(
                f"{name}: {failed} requests lost in a failed engine, {uncached} not cacheable"
                for name, (failed, uncached) in lost.items()
            )
            + "; run the same command again, it sends only what is missing"
        )


@dataclass
class StepStats:
    """What one step did: requests considered, answered from the cache, sent, lost."""

    requests: int = 0
    cached: int = 0
    duplicates: int = 0
    """Requests whose key was already to be sent in this step (the same question asked twice)."""
    sent: int = 0
    batches: int = 0
    stored: int = 0
    uncached: int = 0
    """Answered with a failure that is not cached (transient, or a failed batch): sent again on the next run."""
    failed_batches: int = 0
    """Batches with requests lost in a failed engine."""
    failed_requests: int = 0
    """Requests in flight in an engine that failed: not cached, sent again on the next run."""
    seconds: float = 0.0
    """Wall time of the step on the driver: looking up keys, the Ray Data pipeline, committing."""
    startup_seconds: float = 0.0
    """From starting the pipeline to its first answer, less that batch's engine time: starting the replicas, loading the model."""
    engine_seconds: float = 0.0
    """Time the replicas' engines had requests in flight, summed over replicas."""
    replica_busy: dict[str, float] = field(default_factory=dict)
    """Each replica's busy fraction: its engine's time with requests in flight over its time since its first request."""
    load_seconds: float = 0.0
    """The slowest model load of the replicas that answered in this step (made once a run: the same in every step)."""
    replica_processes: int = 0
    """Replica processes that answered: more than the replicas when Ray restarted some."""
    replicas: int = 0
    """The pool's size at the step's start: the replicas asked for, or fewer when the cluster had lost nodes."""
    attempts: int = 1
    """More than 1 when nodes left the cluster during the step and it ran again for what was missing."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RayRun:
    """The Ray steps of one run, and the driver's passes' reports when they ran."""

    replicas: int = 0
    steps: dict[str, StepStats] = field(default_factory=dict)
    seconds: float = 0.0
    """The Ray part of the run (the driver's sample and recover stages not included)."""
    report: SampleReport | None = None
    """The sampling report of the driver's sample stage (or of an earlier run when the family was already sampled)."""
    recovery: RecoveryReport | None = None
    """The recovery report of the driver's recover stage (or an earlier run's); None without a `recovery:` block."""
    model_loads: dict[str, int] = field(default_factory=dict)
    """Model loads by replica process (host:pid), as the replicas count them: one a model for the whole run, more only
    for an engine replaced after it failed; a replica Ray restarted is a new process, with its own load."""

    @property
    def complete(self) -> bool:
        return all(s.failed_requests == 0 and s.uncached == 0 for s in self.steps.values())

    @property
    def startup_seconds(self) -> float:
        return sum(s.startup_seconds for s in self.steps.values())

    @property
    def load_seconds(self) -> float:
        return max((s.load_seconds for s in self.steps.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "seconds": round(self.seconds, 3),
            "startup_seconds": round(self.startup_seconds, 3),
            "model_loads": self.model_loads,
            "steps": {name: s.to_dict() for name, s in self.steps.items()},
        }


# --- on the workers -------------------------------------------------------------------------------
