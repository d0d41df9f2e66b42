// Job identity: what tells the ranks of one job from those of another job
// that reaches the same rendezvous address (two jobs on one MASTER_PORT).
//
// Two things, checked at every rendezvous (docs/TRANSPORTS.md, "Job identity"):
//   - the token (NCCLZ_TOKEN, or the random one inside a UniqueId): a secret,
//     proven by challenge and response, never sent;
//   - the job id: the launcher's id of this run, the same on every rank of one
//     launch and different between launches; public. The first of these
//     variables that is set gives it (the name is part of the id, so messages
//     say where it came from):
//       NCCLZ_JOB_ID          (set by ncclz-run; set it yourself to override)
//       TORCHELASTIC_RUN_ID   (torchrun; "none", its default without
//                              --rdzv-id, does not count)
//       PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid   (mpirun)
//       SLURM_JOB_ID [+ SLURM_STEP_ID]            (srun)
//       PBS_JOBID, LSB_JOBID                      (PBS, LSF)
// A job with neither ("anonymous": hand-set MASTER_ADDR/PORT, no token) is
// still protected by conflict detection (a duplicate rank, a second rank 0 or
// a world-size mismatch stops the job), but only a token or a job id keeps a
// second job out for sure.
#pragma once

#include <string>

namespace ncclz::bootstrap {

/// "NAME=value" of the first job-id variable set (see above), or "" when none
/// is. Values longer than 160 bytes are replaced by their SHA-256.
std::string job_id_from_env();

/// An 8-hex-digit tag of a job id (the first bytes of its SHA-256), the head of
/// the job key, so that shared-memory segment names say which job made them
/// (ncclz-run removes its job's leftovers by this tag).
std::string job_tag(const std::string& job_id);

}  // namespace ncclz::bootstrap
