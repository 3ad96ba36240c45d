// Parsing and applying WriterPriority (sched_setscheduler + setpriority on one
// thread: Linux schedules threads individually).
#include "storage/writer_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>

namespace prefixd {

Result<WriterPriority> parse_writer_priority(const std::string& text) {
  WriterPriority p;
  if (text == "idle") {
    p.policy = WriterPriority::Policy::kIdle;
    return p;
  }
  const std::string prefix = "batch:";
  if (text.rfind(prefix, 0) == 0) {
    const char* first = text.data() + prefix.size();
    const char* last = text.data() + text.size();
    int32_t nice = -1;
    const auto [end, ec] = std::from_chars(first, last, nice);
    if (ec == std::errc() && end == last && nice >= 0 && nice <= 19) {
      p.policy = WriterPriority::Policy::kBatch;
      p.nice = nice;
      return p;
    }
  }
  return Status::error("cache writer priority '" + text + "': expected idle or batch:N with N in 0..19");
}

std::string writer_priority_name(const WriterPriority& priority) {
  if (priority.policy == WriterPriority::Policy::kIdle) return "idle";
  return "batch:" + std::to_string(priority.nice);
}

pid_t apply_writer_priority(const WriterPriority& priority) {
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  sched_param param{};
  const int policy = priority.policy == WriterPriority::Policy::kIdle ? SCHED_IDLE : SCHED_BATCH;
  const int nice = priority.policy == WriterPriority::Policy::kIdle ? 19 : priority.nice;
  if (sched_setscheduler(tid, policy, &param) != 0 || priority.policy == WriterPriority::Policy::kBatch) {
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice);
  }
  return tid;
}

bool raise_writer_to_normal(pid_t tid) {
  sched_param param{};
  return sched_setscheduler(tid, SCHED_OTHER, &param) == 0 &&
         setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 0) == 0;
}

}  // namespace prefixd
