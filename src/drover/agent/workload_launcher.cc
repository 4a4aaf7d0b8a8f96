#include "drover/agent/workload_launcher.h"

namespace drover::agent {
namespace {

class SupervisorLauncher final : public WorkloadLauncher {
 public:
  SupervisorLauncher(std::string exe, bool spare)
      : exe_(std::move(exe)), pool_(spare ? std::make_unique<SupervisorPool>(exe_) : nullptr) {
    if (pool_) pool_->Refill();  // the first job finds its supervisor waiting
  }

  Result<Launched> Launch(const std::string& job_dir) override {
    if (pool_) {
      DROVER_ASSIGN_OR_RETURN(SupervisorPool::Launched l, pool_->Launch(job_dir));
      return Launched{l.pid, l.done_fd};
    }
    DROVER_ASSIGN_OR_RETURN(pid_t pid, SpawnSupervisor(exe_, job_dir));
    return Launched{pid, -1};
  }

  Heard Hear(pid_t pid) override { return pool_ ? pool_->Hear(pid) : Heard::kGone; }

  void Refill() override {
    if (pool_) pool_->Refill();
  }

 private:
  const std::string exe_;
  std::unique_ptr<SupervisorPool> pool_;  // the unused spare reads the end of its input and exits with it
};

}  // namespace

std::unique_ptr<WorkloadLauncher> MakeSupervisorLauncher(const std::string& exe, bool spare) {
  return std::make_unique<SupervisorLauncher>(exe, spare);
}

}  // namespace drover::agent
