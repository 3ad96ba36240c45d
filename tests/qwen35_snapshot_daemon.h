// The daemon of the qwen35 host-tier snapshot cases (test_daemon_qwen35_snapshots,
// test_daemon_qwen35_usage): rand-qwen35 on two threads, blocks of 16, F32
// K/V, a snapshot every 8 blocks, ONE device snapshot slot (so earlier
// snapshots leave the device as later ones come), and host and disk tiers
// written through (so every snapshot is in the host tier when taken).
#pragma once

#include <string>
#include <vector>

#include "tests/golden.h"

namespace prefixd::testing {

inline std::vector<std::string> qwen35_one_snapshot_slot_args(const std::string& disk_dir) {
  return {"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "2", "--block-size", "16",
          "--kv-dtype", "f32", "--snapshot-interval-blocks", "8", "--state-snapshots", "1", "--host-cache-gb", "1",
          "--disk-cache-dir", disk_dir, "--write-policy", "write-through"};
}

}  // namespace prefixd::testing
