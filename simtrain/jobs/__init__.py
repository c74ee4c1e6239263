"""Several jobs on one cluster: placement, loading and the shared run (see docs/jobs.md)."""

from simtrain.jobs.run import JobsResult, simulate_jobs
from simtrain.jobs.spec import Job, JobsScenario, is_jobs_file, load_jobs

__all__ = ["Job", "JobsResult", "JobsScenario", "is_jobs_file", "load_jobs", "simulate_jobs"]
