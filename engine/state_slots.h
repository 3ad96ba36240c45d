// Which recurrent state slot (KvPool::state, BatchSeq::state_slot) each
// running sequence of a model with recurrent layers owns: slots
// [0, n_slots), one per running sequence (the state snapshots' slots come
// after them, engine/state_snapshots.h). A slot is a sequence's from its
// admission when it resumes a cached prefix (its snapshot is copied in then,
// SchedulerHooks::resume_state), else from its first step, until it leaves
// the running set (finished, failed or preempted). A sequence that starts at
// position 0 needs no clearing: the kernels ignore what the slot held.
//
// Thread: the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "engine/sequence.h"

namespace prefixd {

class StateSlots {
 public:
  explicit StateSlots(int32_t n_slots) {
    for (int32_t i = n_slots - 1; i >= 0; --i) free_.push_back(i);
  }

  // Frees the slots of sequences no longer in `running`.
  void retain(const std::vector<std::unique_ptr<Sequence>>& running) {
    std::unordered_map<uint64_t, int32_t> kept;
    for (const auto& s : running) {
      auto it = slot_.find(s->id);
      if (it != slot_.end()) kept.emplace(it->first, it->second);
    }
    for (const auto& [id, slot] : slot_) {
      if (kept.find(id) == kept.end()) free_.push_back(slot);
    }
    slot_.swap(kept);
  }

  // The slot of sequence `id`, a free one on its first call.
  int32_t slot_of(uint64_t id) {
    auto it = slot_.find(id);
    if (it != slot_.end()) return it->second;
    PREFIXD_CHECK(!free_.empty(), "more running sequences than state slots");
    const int32_t slot = free_.back();
    free_.pop_back();
    slot_.emplace(id, slot);
    return slot;
  }

  int32_t n_assigned() const { return static_cast<int32_t>(slot_.size()); }

 private:
  std::unordered_map<uint64_t, int32_t> slot_;  // sequence id -> slot
  std::vector<int32_t> free_;                    // slots no sequence owns
};

}  // namespace prefixd
