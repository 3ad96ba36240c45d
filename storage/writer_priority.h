// How the tiers' background writers (the disk writer thread of TierManager,
// the remote tier's writer) share the CPU with serving: at SCHED_IDLE they get
// only time nobody else wants, so under constant load write-through falls
// behind; at SCHED_BATCH with a nice level they get a bounded share (CFS
// weights: nice 10 is about a tenth of a nice-0 thread's share) and are never
// preferred on wake-up, so they keep up without taking prefill's CPU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace prefixd {

struct WriterPriority {
  enum class Policy : uint8_t {
    kIdle,   // SCHED_IDLE: only otherwise idle CPU time
    kBatch,  // SCHED_BATCH at `nice`: a bounded share under load
  };
  Policy policy = Policy::kBatch;
  int32_t nice = 10;  // kBatch only, 0..19
};

// "idle" or "batch:N" (N in 0..19); errors name the value and the forms.
Result<WriterPriority> parse_writer_priority(const std::string& text);
std::string writer_priority_name(const WriterPriority& priority);

// Applies `priority` to the calling thread; returns its thread id. Best
// effort: where the kernel refuses the policy, the thread gets nice 19.
pid_t apply_writer_priority(const WriterPriority& priority);

// Lifts thread `tid` back to SCHED_OTHER at nice 0 (shutdown: the last writes
// then run at the speed of serving threads). Lowering a nice value needs
// CAP_SYS_NICE or an RLIMIT_NICE that allows it; false when refused.
bool raise_writer_to_normal(pid_t tid);

}  // namespace prefixd
