// Security suite, disk tier: someone who can write the RocksDB directory but
// does not hold the deployment secret replaces every record with a forged one
// whose XXH3 checksums are all valid. The real daemon must reject each one
// (its MAC does not verify), count it, recompute, and answer exactly as before.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "storage/block_record.h"
#include "storage/record_mac.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using namespace prefixd::testing;
using json = nlohmann::json;

namespace {

// stories260K, F32 KV, a disk tier in `dir`, onboards forced (the model is so
// small that the policy would often recompute instead).
std::vector<std::string> args_for(const std::string& dir) {
  return {"--model", stories_model_path(), "--threads", "1", "--kv-dtype", "f32",
          "--disk-cache-dir", dir, "--restore-policy", "always"};
}

std::vector<int32_t> long_prompt() {
  std::vector<int32_t> p = {1};
  for (int t = 1; t < 180; ++t) p.push_back(3 + (t * 17 + (t * t) % 7) % 500);
  return p;
}

json completion() { return json{{"prompt", long_prompt()}, {"max_tokens", 4}, {"temperature", 0}}; }

int64_t disk_blocks(httplib::Client& c) {
  HttpAnswer s = get(c, "/v1/cache/stats");
  REQUIRE(s.status == 200);
  return s.body["tiers"]["disk"]["blocks"].get<int64_t>();
}

// Rewrites every record value in the database: the same header and tokens, a
// payload of zeros, checksums recomputed, and a made-up MAC trailer. Returns
// how many it forged.
int forge_every_record(const std::string& dir) {
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"access", {}}, {"meta", {}}, {"pins", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(), dir, families, &handles, &db);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  std::vector<std::pair<std::string, std::string>> forged;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[0]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string value = it->value().ToString();
    REQUIRE(value.size() > RecordMac::kTrailerBytes);
    const auto* bytes = reinterpret_cast<const uint8_t*>(value.data());
    BlockRecordView view;
    REQUIRE(check_block_record_integrity(bytes, value.size() - RecordMac::kTrailerBytes, &view) ==
            RecordCheck::kOk);
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < view.info.geometry.block_size; ++i) tokens.push_back(view.token(i));
    std::vector<uint8_t> payload(view.payload_bytes, 0);
    RecordPtr record = encode_block_record(view.info, tokens, payload);
    REQUIRE(record != nullptr);
    REQUIRE(check_block_record_integrity(record->data(), record->size(), nullptr) == RecordCheck::kOk);
    std::string out(reinterpret_cast<const char*>(record->data()), record->size());
    out.append(RecordMac::kTrailerBytes, '\x42');
    forged.emplace_back(it->key().ToString(), std::move(out));
  }
  REQUIRE(it->status().ok());
  it.reset();
  for (const auto& [k, v] : forged) REQUIRE(db->Put(rocksdb::WriteOptions(), handles[0], k, v).ok());
  REQUIRE(db->Flush(rocksdb::FlushOptions(), handles).ok());
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  delete db;
  return static_cast<int>(forged.size());
}

}  // namespace

TEST_CASE("forged disk records with valid checksums and no valid MAC are rejected, counted and recomputed") {
  TempDir dir;
  const int n_blocks = 180 / 16;
  json first;
  {
    auto d = start_or_fail(args_for(dir.path));
    auto c = d->client();
    HttpAnswer a = post_json(*c, "/v1/completions", completion());
    REQUIRE(a.status == 200);
    first = a.body["choices"][0]["token_ids"];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (disk_blocks(*c) < n_blocks && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(disk_blocks(*c) == n_blocks);
    REQUIRE(d->stop() == 0);
  }
  REQUIRE(forge_every_record(dir.path) == n_blocks);

  auto d = start_or_fail(args_for(dir.path));
  auto c = d->client();
  HttpAnswer a = post_json(*c, "/v1/completions", completion());
  REQUIRE(a.status == 200);
  CHECK(a.body["choices"][0]["token_ids"] == first);  // the zeros were never used
  CHECK(a.body["prefix_cache"]["disk_tokens"] == 0);
  CHECK(a.body["prefix_cache"]["prefill_tokens"] == 180);
  const std::string m = c->Get("/metrics")->body;
  const double rejected = metric(m, "prefixd_unauthenticated_records_total{tier=\"disk\"}");
  CHECK(rejected >= 1);  // the chain stops at its first rejected block
  CHECK(metric(m, "prefixd_corrupt_records_total{tier=\"disk\"}") == rejected);
  CHECK(metric(m, "prefixd_cached_tokens_total{tier=\"disk\"}") == 0);
  // The rejected records were deleted; the recomputed blocks are written back
  // with valid MACs and serve the next restart.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (disk_blocks(*c) < n_blocks && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(d->stop() == 0);
  auto d2 = start_or_fail(args_for(dir.path));
  auto c2 = d2->client();
  HttpAnswer b = post_json(*c2, "/v1/completions", completion());
  REQUIRE(b.status == 200);
  CHECK(b.body["choices"][0]["token_ids"] == first);
  CHECK(b.body["prefix_cache"]["disk_tokens"] == n_blocks * 16);
  CHECK(metric(c2->Get("/metrics")->body, "prefixd_unauthenticated_records_total{tier=\"disk\"}") == 0);
}
