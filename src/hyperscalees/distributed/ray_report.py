"""What a Ray run reports: the step's breakdown (the driver's phases and its workers') and the
coordinator's counters; a part of :class:`~.ray.RayBackend` (its state: ``actors``, ``ready``,
``counters``, ``phases`` ...), kept apart from the coordinating itself."""
from __future__ import annotations


class RayReports:
    """The reporting half of :class:`~.ray.RayBackend` (listed before ``AbstractBackend`` in its bases)."""

    def _read_worker_phases(self) -> list[dict]:
        """Every live worker's ``phase_times()`` (one call each, at the end; [] if they cannot answer)."""
        if self._ray is None or not self.actors:
            return self._worker_phases
        try:
            return self._ray.get([self.actors[slot].phase_times.remote() for slot in sorted(self.ready)], timeout=30)
        except (self._ray.exceptions.RayError, AttributeError):
            return []

    def reset_breakdown(self) -> None:
        super().reset_breakdown()
        for slot in sorted(self.ready):       # after the calls already queued on each actor
            self.actors[slot].reset_phases.remote()

    def breakdown(self) -> dict:
        """Mean ms per step: the driver's phases, and each phase of a worker (mean over workers)."""
        out = super().breakdown()
        got = self._read_worker_phases() if self.actors else self._worker_phases
        steps = self.phases.steps
        if got and steps:
            names = {k for g in got for k in g if k != "steps"}
            out["workers"] = {k: 1000 * sum(g.get(k, 0.0) for g in got) / len(got) / steps for k in sorted(names)}
        return out

    def report(self) -> dict:
        """What the coordinator counted over the run."""
        c = self.counters
        return {"workers": (len(self.ready) or self._workers_at_close) * self.config.group_size,
                "assigned": c.assigned, "reissued": c.reissued,
                "duplicates": c.duplicates, "failed": c.failed, "requeued": c.requeued, "rejected": self.rejected,
                "drift_repairs": self.drift_repairs, "restarts": self.restarts, "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "median_chunk_s": self.times.median, "breakdown_ms": self.breakdown(),
                "chunks_by_node": dict(self.chunks_by_node)}
