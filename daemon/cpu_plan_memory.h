// The `auto` CPU plan kept across starts. Which set runs each kernel family
// decides the last bits of a result (a BF16 dot product rounds x, a widening
// set does not), and `auto` picks by timing, which a loaded machine can tip
// either way. A daemon restarted with another plan would compute a suffix
// over a prefix read back from the disk tier differently from the whole
// prompt: not the uncached answer. So the first start on a CPU calibrates
// and writes the plan to CACHE_DIR/cpu-plans/<key>.plan (key: a hash of the
// CPU's model name and features, so a VM moved to another host CPU
// calibrates again), and every later start, and every daemon sharing the
// cache directory, runs that plan. The first writer wins: daemons starting
// together all read back the file that landed.
#pragma once

#include <string>

#include "kernels/cpu/isa_plan.h"

namespace prefixd {

struct RememberedCpuPlan {
  cpu::CpuIsaPlan plan;  // automatic == true
  std::string path;      // the file; empty without a usable cache directory
  bool read_back = false;  // taken from the file (else calibrated now)
  std::string warning;   // a file that was unreadable or named other sets, replaced
};

// This CPU's identity for the plan's file name: its model name and features.
std::string cpu_plan_key();

// The plan `auto` runs: the one remembered under `cache_dir`, else a fresh
// calibration (cpu::auto_plan()) written there. Without a cache directory
// (empty, or one that cannot be made private), the calibration alone.
RememberedCpuPlan remember_auto_cpu_plan(const std::string& cache_dir);

}  // namespace prefixd
