// The `auto` CPU plan kept across starts (cpu_plan_memory.h).
#include "daemon/cpu_plan_memory.h"

#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/private_files.h"
#include "kernels/cpu/cpu_isa.h"

namespace prefixd {
namespace {

// The first "model name" of /proc/cpuinfo ("" where there is none).
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    return colon == std::string::npos ? "" : line.substr(colon + 1);
  }
  return "";
}

// The plan in `path`, when it is this user's private file holding a plan for
// this CPU with auto's base set.
Result<cpu::CpuIsaPlan> read_plan(const std::string& path) {
  Result<std::string> text = read_private_file(path, 4096, "the CPU plan file", FileAccess::kOwnerOnly);
  if (!text.ok()) return text.status();
  std::string spec = text.value();
  while (!spec.empty() && (spec.back() == '\n' || spec.back() == ' ')) spec.pop_back();
  Result<cpu::CpuIsaPlan> plan = cpu::parse_cpu_isa_plan(spec);
  if (!plan.ok()) return Status::error("the CPU plan file " + path + ": " + plan.message());
  if (plan->base != cpu::best_cpu_isa())
    return Status::error("the CPU plan file " + path + " has base set " + cpu::cpu_isa_name(plan->base) +
                         ", not this CPU's best (" + cpu::cpu_isa_name(cpu::best_cpu_isa()) + ")");
  plan->automatic = true;
  return plan;
}

}  // namespace

std::string cpu_plan_key() { return cpu_model_name() + "|" + cpu::cpu_feature_string(); }

RememberedCpuPlan remember_auto_cpu_plan(const std::string& cache_dir) {
  RememberedCpuPlan r;
  const std::string dir = cache_dir + "/cpu-plans";
  if (cache_dir.empty() || !make_private_dir(cache_dir).ok() || !make_private_dir(dir).ok()) {
    r.plan = cpu::auto_plan();
    return r;
  }
  const std::string key = cpu_plan_key();
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.plan",
                static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  r.path = dir + "/" + name;
  if (::access(r.path.c_str(), F_OK) == 0) {
    Result<cpu::CpuIsaPlan> kept = read_plan(r.path);
    if (kept.ok()) {
      r.plan = kept.value();
      r.read_back = true;
      return r;
    }
    r.warning = kept.message() + "; calibrated again and replaced";
    ::unlink(r.path.c_str());
  }
  r.plan = cpu::auto_plan();
  // Written beside, then linked into place: link fails when another daemon's
  // file landed first, and that one is read back and run.
  const std::string tmp = r.path + "." + std::to_string(::getpid()) + ".new";
  const std::string text = cpu::plan_spec(r.plan) + "\n";
  if (!write_file_atomically(tmp, text.data(), text.size()).ok()) return r;
  const bool linked = ::link(tmp.c_str(), r.path.c_str()) == 0;
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (!linked && link_errno == EEXIST) {
    Result<cpu::CpuIsaPlan> other = read_plan(r.path);
    if (other.ok()) {
      r.plan = other.value();
      r.read_back = true;
    }
  }
  return r;
}

}  // namespace prefixd
