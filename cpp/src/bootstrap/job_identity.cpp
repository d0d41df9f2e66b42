#include "bootstrap/job_identity.hpp"

#include "base/env.hpp"
#include "base/sha256.hpp"

namespace ncclz::bootstrap {
namespace {

std::string bounded(const std::string& name, const std::string& value) {
  if (value.size() <= 160) return name + "=" + value;
  return name + "=sha256:" + base::to_hex(base::sha256(value));
}

}  // namespace

std::string job_id_from_env() {
  if (auto v = env::get("NCCLZ_JOB_ID")) return bounded("NCCLZ_JOB_ID", *v);
  if (auto v = env::get("TORCHELASTIC_RUN_ID"); v && *v != "none") return bounded("TORCHELASTIC_RUN_ID", *v);
  if (auto v = env::get("PMIX_NAMESPACE")) return bounded("PMIX_NAMESPACE", *v);
  if (auto v = env::get("OMPI_MCA_ess_base_jobid")) return bounded("OMPI_MCA_ess_base_jobid", *v);
  if (auto v = env::get("SLURM_JOB_ID")) {
    std::string id = *v;
    if (auto s = env::get("SLURM_STEP_ID")) id += "/SLURM_STEP_ID=" + *s;
    return bounded("SLURM_JOB_ID", id);
  }
  if (auto v = env::get("PBS_JOBID")) return bounded("PBS_JOBID", *v);
  if (auto v = env::get("LSB_JOBID")) return bounded("LSB_JOBID", *v);
  return "";
}

std::string job_tag(const std::string& job_id) { return base::to_hex(base::sha256(job_id)).substr(0, 8); }

}  // namespace ncclz::bootstrap
