// Tests for RemoteTier against real memcached servers on loopback ports:
// URL parsing, round trip over two servers, concurrent callers, chain
// cut-offs, forged values, the item size check at open, a server killed
// (ejected, then back), a stalled server (timeouts), shutdown, the write queue
// bound (the TierManager's use of it: tests/test_tier_manager.cpp). Skipped
// (exit 77) when /usr/bin/memcached is not installed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/record_mac.h"
#include "storage/remote_tier.h"
#include "tests/memcached_server.h"
#include "tests/temp_dir.h"
#include "tests/test_blocks.h"

using namespace prefixd;
using namespace prefixd::testing;
using Clock = std::chrono::steady_clock;

namespace {

const std::array<uint8_t, 16> kSecret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// A chain: keys and expectations of copies of `blocks` (the expectations'
// token spans point into the copies, which move with the Chain).
struct Chain {
  std::vector<TestBlock> blocks;
  std::vector<BlockKey> keys;
  std::vector<RecordExpectations> expected;
};
Chain chain_of(std::vector<TestBlock> blocks) {
  Chain c;
  c.blocks = std::move(blocks);
  for (const TestBlock& b : c.blocks) {
    c.keys.push_back(b.key);
    c.expected.push_back(b.expect());
  }
  return c;
}

bool same_bytes(const RecordPtr& a, const RecordPtr& b) {
  return a && b && a->size() == b->size() && std::memcmp(a->data(), b->data(), a->size()) == 0;
}

// One ASCII-protocol command; reads until the reply ends with `terminator`.
std::string ascii_command(uint16_t port, const std::string& command,
                          const std::string& terminator) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  std::string reply;
  if (send(fd, command.data(), command.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(command.size())) {
    char buf[4096];
    for (int i = 0; i < 10000; ++i) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
      if (reply.size() >= terminator.size() &&
          reply.compare(reply.size() - terminator.size(), terminator.size(), terminator) == 0) {
        break;
      }
    }
  }
  close(fd);
  return reply;
}

// The block records a server holds: its "curr_items" stat less the pool's
// generation counter of the tests' secret and namespace, when it holds that;
// or -1.
long curr_items(uint16_t port) {
  const std::string stats = ascii_command(port, "stats\r\n", "END\r\n");
  const size_t at = stats.find("STAT curr_items ");
  if (at == std::string::npos) return -1;
  const long n = std::stol(stats.substr(at + 16));
  const std::string counter = ascii_command(
      port, "get " + RemoteTier::generation_key(kSecret, Hash128{}) + "\r\n", "END\r\n");
  return counter.rfind("VALUE ", 0) == 0 ? n - 1 : n;
}

bool server_holds(uint16_t port, const BlockKey& key) {
  const std::string reply =
      ascii_command(port, "get " + RemoteTier::memcached_key(key) + "\r\n", "END\r\n");
  return reply.rfind("VALUE ", 0) == 0;
}

RemoteTierOptions tier_options(std::vector<RemoteServer> servers) {
  RemoteTierOptions o;
  o.servers = std::move(servers);
  o.deployment_secret = kSecret;
  o.record_bytes = block_record_bytes(kGeom);
  o.timeout = std::chrono::milliseconds(200);
  o.failure_limit = 2;
  o.retry_interval = std::chrono::milliseconds(1000);
  return o;
}

std::unique_ptr<RemoteTier> open_tier(const RemoteTierOptions& o) {
  auto t = RemoteTier::open(o);
  REQUIRE_MESSAGE(t.ok(), t.message());
  return std::move(t).value();
}

}  // namespace

TEST_CASE("remote_tier_parses_server_lists_and_refuses_bad_urls") {
  auto one = parse_remote_cache_url("memcached://127.0.0.1:11211");
  REQUIRE_MESSAGE(one.ok(), one.message());
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].host == "127.0.0.1");
  CHECK((*one)[0].port == 11211);

  auto many = parse_remote_cache_url("memcached://cache-a.internal:11211,10.0.0.7:22122,[::1]:5");
  REQUIRE_MESSAGE(many.ok(), many.message());
  REQUIRE(many->size() == 3);
  CHECK((*many)[0].host == "cache-a.internal");
  CHECK((*many)[0].port == 11211);
  CHECK((*many)[1].host == "10.0.0.7");
  CHECK((*many)[1].port == 22122);
  CHECK((*many)[2].host == "::1");
  CHECK((*many)[2].port == 5);

  const std::pair<const char*, const char*> bad[] = {
      {"redis://127.0.0.1:6379", "scheme"},
      {"127.0.0.1:11211", "scheme"},
      {"memcached://", "no servers"},
      {"memcached://127.0.0.1", "missing :PORT"},
      {"memcached://127.0.0.1:", "port"},
      {"memcached://127.0.0.1:0", "port"},
      {"memcached://127.0.0.1:65536", "port"},
      {"memcached://127.0.0.1:11x", "port"},
      {"memcached://:11211", "empty host"},
      {"memcached://a:1,,b:2", "empty server entry"},
      {"memcached://a:1,", "empty server entry"},
      {"memcached://a:1,a:1", "twice"},
      {"memcached://::1:11211", "IPv6"},
      {"memcached://a/b:1", "host"},
  };
  for (const auto& [url, why] : bad) {
    auto r = parse_remote_cache_url(url);
    CHECK_MESSAGE(!r.ok(), url);
    if (!r.ok()) {
      CHECK_MESSAGE(r.message().find(why) != std::string::npos, r.message());
      CHECK_MESSAGE(r.message().find(url) != std::string::npos, r.message());
    }
  }
}

TEST_CASE("remote_tier_key_is_prefix_and_48_hex_digits") {
  const BlockKey key{0x0102030405060708ull, Hash128{0x1112131415161718ull, 0xA1A2A3A4A5A6A7A8ull}};
  CHECK(RemoteTier::memcached_key(key) == "pfxd1:0102030405060708a1a2a3a4a5a6a7a81112131415161718");
}

TEST_CASE("remote_tier_round_trip_spreads_a_chain_over_two_servers") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  CHECK(tier->stats().servers == 2);
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 16; ++i) blocks.push_back(make_block(i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  RemoteTierStats s = tier->stats();
  CHECK(s.writes == 16);
  const uint64_t stored_bytes = blocks[0].record->size() + RecordMac::kTrailerBytes;
  CHECK(s.written_bytes == 16 * stored_bytes);
  CHECK(s.pending_write_bytes == 0);
  CHECK(s.errors == 0);
  // Ketama put some keys on each server (16 keys all on one: p = 2^-15).
  const long on_a = curr_items(a.port());
  const long on_b = curr_items(b.port());
  CHECK(on_a > 0);
  CHECK(on_b > 0);
  CHECK(on_a + on_b == 16);

  const Chain c = chain_of(blocks);
  const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
  REQUIRE(got.size() == 16);
  for (size_t i = 0; i < got.size(); ++i) CHECK(same_bytes(got[i], blocks[i].record));
  s = tier->stats();
  CHECK(s.hits == 16);
  CHECK(s.misses == 0);
  CHECK(s.read_bytes == 16 * stored_bytes);
  CHECK(s.corrupt_records == 0);
  CHECK(s.errors == 0);

  // Stored and read: queuing them again writes nothing.
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  CHECK(tier->stats().writes == 16);

  // A second tier (another replica with the same secret) reads the same bytes.
  auto replica = open_tier(tier_options({b.server(), a.server()}));
  const std::vector<RecordPtr> again = replica->get_chain(c.keys, c.expected);
  REQUIRE(again.size() == 16);
  CHECK(same_bytes(again[15], blocks[15].record));
}

TEST_CASE("remote_tier_serves_concurrent_callers_with_a_handle_each") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 8; ++i) blocks.push_back(make_block(500 + i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  const Chain c = chain_of(blocks);
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<int> full(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
        bool same = got.size() == blocks.size();
        for (size_t i = 0; same && i < got.size(); ++i) same = same_bytes(got[i], blocks[i].record);
        full[t] += same ? 1 : 0;
        // Writes queued from every thread meanwhile (new keys).
        const TestBlock extra = make_block(600 + static_cast<uint64_t>(t * kRounds + r));
        tier->put_async(extra.key, extra.record);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  tier->wait_idle();
  for (int t = 0; t < kThreads; ++t) CHECK(full[t] == kRounds);
  const RemoteTierStats s = tier->stats();
  CHECK(s.hits == static_cast<uint64_t>(kThreads * kRounds) * blocks.size());
  CHECK(s.misses == 0);
  CHECK(s.writes == blocks.size() + kThreads * kRounds);
  CHECK(s.errors == 0);
  CHECK(curr_items(a.port()) + curr_items(b.port()) == static_cast<long>(s.writes));
}

TEST_CASE("remote_tier_chain_stops_at_first_missing_or_mismatched_block") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 6; ++i) blocks.push_back(make_block(100 + i));
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i != 3) tier->put_async(blocks[i].key, blocks[i].record);
  }
  tier->wait_idle();
  REQUIRE(tier->stats().writes == 5);

  const Chain c = chain_of(blocks);
  std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(same_bytes(got[i], blocks[i].record));
  RemoteTierStats s = tier->stats();
  CHECK(s.hits == 3);
  CHECK(s.misses == 3);  // per key: block 3 and the two after it
  CHECK(s.corrupt_records == 0);

  // Expectations of other tokens for block 1: the record is not that block.
  Chain other = chain_of(blocks);
  const std::vector<int32_t> other_tokens = {7, 7, 7, 7};
  other.expected[1].token_ids = other_tokens;
  got = tier->get_chain(other.keys, other.expected);
  REQUIRE(got.size() == 1);
  CHECK(same_bytes(got[0], blocks[0].record));
  s = tier->stats();
  CHECK(s.hits == 4);
  CHECK(s.misses == 8);
  CHECK(s.corrupt_records == 1);
  CHECK(s.unauthenticated_records == 0);
  // Deleted from the pool: with the right expectations it is now a miss.
  CHECK(!server_holds(a.port(), blocks[1].key));
  CHECK(!server_holds(b.port(), blocks[1].key));
  got = tier->get_chain(c.keys, c.expected);
  CHECK(got.size() == 1);

  // An empty chain asks nothing.
  CHECK(tier->get_chain({}, {}).empty());
}

TEST_CASE("remote_tier_rejects_forged_values_counts_and_deletes_them") {
  MemcachedServer a;
  auto tier = open_tier(tier_options({a.server()}));
  const TestBlock zero_trailer = make_block(1);
  const TestBlock other_secret = make_block(2);
  const TestBlock short_value = make_block(3);
  const TestBlock genuine = make_block(4);

  // A valid record (layout, checksums) with a trailer of zeros.
  std::vector<uint8_t> forged(zero_trailer.record->data(),
                              zero_trailer.record->data() + zero_trailer.record->size());
  forged.resize(forged.size() + RecordMac::kTrailerBytes, 0);
  REQUIRE(tier->debug_set_value(zero_trailer.key, forged).ok());
  // A valid record signed under another deployment's secret.
  std::array<uint8_t, 16> stranger = kSecret;
  stranger[0] ^= 0xFF;
  const RecordMac other_mac(stranger);
  const RecordMac::Trailer t = other_mac.sign(other_secret.record->bytes());
  std::vector<uint8_t> foreign(other_secret.record->data(),
                               other_secret.record->data() + other_secret.record->size());
  foreign.insert(foreign.end(), t.begin(), t.end());
  REQUIRE(tier->debug_set_value(other_secret.key, foreign).ok());
  // Shorter than a trailer.
  const std::vector<uint8_t> tiny = {1, 2, 3};
  REQUIRE(tier->debug_set_value(short_value.key, tiny).ok());
  // The genuine block, through the tier's own writer.
  tier->put_async(genuine.key, genuine.record);
  tier->wait_idle();
  REQUIRE(curr_items(a.port()) == 4);

  for (const TestBlock* blk : {&zero_trailer, &other_secret, &short_value}) {
    const Chain c = chain_of({*blk, genuine});
    CHECK(tier->get_chain(c.keys, c.expected).empty());
    CHECK(!server_holds(a.port(), blk->key));
  }
  RemoteTierStats s = tier->stats();
  CHECK(s.hits == 0);
  CHECK(s.misses == 6);
  CHECK(s.corrupt_records == 3);
  CHECK(s.unauthenticated_records == 3);
  CHECK(curr_items(a.port()) == 1);

  const Chain g = chain_of({genuine});
  const std::vector<RecordPtr> got = tier->get_chain(g.keys, g.expected);
  REQUIRE(got.size() == 1);
  CHECK(same_bytes(got[0], genuine.record));
  // A forged value was never counted as read by this process: it may be
  // written again over the deleted key.
  tier->put_async(zero_trailer.key, zero_trailer.record);
  tier->wait_idle();
  const Chain z = chain_of({zero_trailer});
  CHECK(tier->get_chain(z.keys, z.expected).size() == 1);
}

TEST_CASE("remote_tier_open_refuses_a_small_item_size_and_a_pool_where_no_server_answers") {
  MemcachedServer big;
  MemcachedServer small("1m");
  RemoteTierOptions o = tier_options({big.server(), small.server()});
  o.record_bytes = 1200000;  // a record of a big model: about 1.14 MiB
  auto t = RemoteTier::open(o);
  REQUIRE(!t.ok());
  const std::string m = t.message();
  CHECK_MESSAGE(m.find("127.0.0.1:" + std::to_string(small.port())) != std::string::npos, m);
  CHECK_MESSAGE(m.find("item_size_max") != std::string::npos, m);
  CHECK_MESSAGE(m.find("1048576") != std::string::npos, m);
  CHECK_MESSAGE(m.find("-I 2m") != std::string::npos, m);
  CHECK_MESSAGE(m.find("127.0.0.1:" + std::to_string(big.port())) == std::string::npos, m);

  // The same records fit on the 2m server alone.
  o.servers = {big.server()};
  CHECK(RemoteTier::open(o).ok());

  // A port nobody listens on: alone, refused, naming it; beside one that
  // answers, a warning naming it and a tier that serves the live one.
  const uint16_t dead_port = free_port();
  const std::string dead_name = "127.0.0.1:" + std::to_string(dead_port);
  o.servers = {RemoteServer{"127.0.0.1", dead_port}};
  const auto start = Clock::now();
  auto dead = RemoteTier::open(o);
  REQUIRE(!dead.ok());
  CHECK_MESSAGE(dead.message().find(dead_name) != std::string::npos, dead.message());
  CHECK_MESSAGE(dead.message().find("does not answer") != std::string::npos, dead.message());
  CHECK(Clock::now() - start < std::chrono::seconds(10));  // a hang detector, not a speed test
  std::vector<std::string> warnings;
  o.servers = {big.server(), RemoteServer{"127.0.0.1", dead_port}};
  o.log_warning = [&warnings](const std::string& line) { warnings.push_back(line); };
  auto half = RemoteTier::open(o);
  REQUIRE_MESSAGE(half.ok(), half.message());
  REQUIRE(warnings.size() == 1);
  CHECK_MESSAGE(warnings[0].find(dead_name) != std::string::npos, warnings[0]);
  CHECK_MESSAGE(warnings[0].find("does not answer") != std::string::npos, warnings[0]);

  RemoteTierOptions none = tier_options({});
  CHECK(!RemoteTier::open(none).ok());
  RemoteTierOptions no_size = tier_options({big.server()});
  no_size.record_bytes = 0;
  CHECK(!RemoteTier::open(no_size).ok());
}

TEST_CASE("remote_tier_keeps_serving_the_other_server_when_one_is_killed") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 24; ++i) blocks.push_back(make_block(200 + i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  REQUIRE(tier->stats().writes == 24);
  // Which blocks live on the server that survives.
  std::vector<bool> on_a(blocks.size());
  size_t n_on_a = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    on_a[i] = server_holds(a.port(), blocks[i].key);
    n_on_a += on_a[i] ? 1 : 0;
  }
  REQUIRE(n_on_a > 0);
  REQUIRE(n_on_a < blocks.size());

  b.stop();  // SIGKILL
  const auto start = Clock::now();
  size_t hits = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Chain c = chain_of({blocks[i]});
    const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
    if (on_a[i]) {
      CHECK_MESSAGE(got.size() == 1, "block " << i << " on the live server");
      if (got.size() == 1) CHECK(same_bytes(got[0], blocks[i].record));
    } else {
      CHECK_MESSAGE(got.empty(), "block " << i << " on the killed server");
    }
    hits += got.size();
  }
  CHECK(hits == n_on_a);
  // A chain whose second block is on the killed server: the first still comes.
  {
    size_t i_a = 0, i_b = 0;
    while (!on_a[i_a]) ++i_a;
    while (on_a[i_b]) ++i_b;
    const Chain c = chain_of({blocks[i_a], blocks[i_b]});
    const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
    REQUIRE(got.size() == 1);
    CHECK(same_bytes(got[0], blocks[i_a].record));
  }
  RemoteTierStats s = tier->stats();
  CHECK(s.errors > 0);
  CHECK(s.corrupt_records == 0);

  // New writes: those the ring sends to the live server are stored and read
  // back; those sent to the dead one fail (counted), never hang.
  std::vector<TestBlock> fresh;
  for (uint64_t i = 0; i < 24; ++i) fresh.push_back(make_block(300 + i));
  for (const TestBlock& blk : fresh) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  const RemoteTierStats after = tier->stats();
  const uint64_t stored = after.writes - s.writes;
  CHECK(stored > 0);
  CHECK(after.pending_write_bytes == 0);
  size_t fresh_hits = 0;
  for (const TestBlock& blk : fresh) {
    const Chain c = chain_of({blk});
    const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
    if (!got.empty()) {
      CHECK(same_bytes(got[0], blk.record));
      CHECK(server_holds(a.port(), blk.key));
    }
    fresh_hits += got.size();
  }
  CHECK(fresh_hits == stored);
  CHECK(stored + (after.errors - s.errors) >= fresh.size());  // each write stored or counted

  // The dead server left the ring of every handle after failure_limit
  // refused connects (the reads above), so new writes land on the live
  // server; one that met it as it joined again after retry_interval may have
  // failed. Written again, every block is on the live server.
  std::vector<TestBlock> unstored;
  for (const TestBlock& blk : fresh) {
    if (!server_holds(a.port(), blk.key)) unstored.push_back(blk);
  }
  bool moved = false;
  for (int attempt = 0; attempt < 100 && !moved; ++attempt) {
    for (const TestBlock& blk : unstored) tier->put_async(blk.key, blk.record);
    tier->wait_idle();
    moved = std::all_of(unstored.begin(), unstored.end(),
                        [&](const TestBlock& blk) { return server_holds(a.port(), blk.key); });
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK_MESSAGE(moved, "the killed server did not leave the ring within 10 s");
  CHECK(Clock::now() - start < std::chrono::seconds(30));  // a hang detector

  // Restarted on its port, it joins the ring again after the retry interval:
  // a new block that maps to it lands there.
  MemcachedServer back("2m", b.port());
  bool rejoined = false;
  for (int attempt = 0; attempt < 100 && !rejoined; ++attempt) {
    const TestBlock blk = make_block(1000 + static_cast<uint64_t>(attempt));
    tier->put_async(blk.key, blk.record);
    tier->wait_idle();
    rejoined = curr_items(back.port()) > 0;
    if (!rejoined) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK_MESSAGE(rejoined, "the restarted server did not rejoin the ring within 10 s");
}

TEST_CASE("remote_tier_reads_back_what_it_wrote_after_a_server_dies_while_the_dead_one_keeps_retrying") {
  // Every handle of the tier (the writer's, each reader's) leaves the dead
  // server out of its ring at once, and takes it back at once: a block
  // written again after the death is read back from where it was written,
  // also across the retry intervals at which the dead server is tried again.
  MemcachedServer a, b;
  RemoteTierOptions o = tier_options({a.server(), b.server()});
  o.failure_limit = 1;  // the daemon's default
  auto tier = open_tier(o);
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 24; ++i) blocks.push_back(make_block(500 + i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  b.stop();  // SIGKILL
  // What was on b is recomputed and written again, as the engine does.
  for (const TestBlock& blk : blocks) {
    const Chain c = chain_of({blk});
    if (tier->get_chain(c.keys, c.expected).empty()) tier->put_async(blk.key, blk.record);
  }
  tier->wait_idle();
  // From now on every read finds every block, for 3.5 retry intervals.
  const auto until = Clock::now() + std::chrono::milliseconds(3500);
  int passes = 0;
  while (Clock::now() < until) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Chain c = chain_of({blocks[i]});
      const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
      CHECK_MESSAGE(got.size() == 1, "block " << i << " missing in pass " << passes);
    }
    ++passes;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(passes > 10);
}

TEST_CASE("remote_tier_counts_timeouts_of_a_server_that_stops_answering") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 16; ++i) blocks.push_back(make_block(400 + i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  REQUIRE(tier->stats().writes == 16);
  std::vector<bool> on_a(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) on_a[i] = server_holds(a.port(), blocks[i].key);

  b.pause();
  const RemoteTierStats before = tier->stats();
  size_t n_b_asked = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Chain c = chain_of({blocks[i]});
    const auto start = Clock::now();
    const std::vector<RecordPtr> got = tier->get_chain(c.keys, c.expected);
    // A hang detector (the bound is 200 ms per server), not a speed test.
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(got.size() == (on_a[i] ? 1u : 0u));
    if (!on_a[i]) ++n_b_asked;
  }
  const RemoteTierStats s = tier->stats();
  REQUIRE(n_b_asked > 0);
  CHECK(s.timeouts - before.timeouts >= 1);
  CHECK(s.errors - before.errors >= s.timeouts - before.timeouts);
  CHECK(s.corrupt_records == 0);

  // Answering again: once it is back in the ring (it was taken out after
  // timeout_limit timeouts, for retry_interval), the whole chain comes back
  // (no stale answers: a timed-out connection is closed).
  b.resume();
  const Chain c = chain_of(blocks);
  std::vector<RecordPtr> got;
  for (int attempt = 0; attempt < 200 && got.size() != blocks.size(); ++attempt) {
    got = tier->get_chain(c.keys, c.expected);
    if (got.size() != blocks.size()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(got.size() == blocks.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(same_bytes(got[i], blocks[i].record));
  CHECK(tier->stats().corrupt_records == 0);
}

namespace {

// b's place in the tier's ring (RemoteTierStats::server_states).
RemoteServerState state_of(const RemoteTier& tier, const MemcachedServer& server) {
  for (const RemoteServerState& st : tier.stats().server_states) {
    if (st.server.port == server.port()) return st;
  }
  FAIL("server not in server_states");
  return {};
}

// Waits (at most 30 s, polling) until `done` holds.
template <typename F>
bool wait_for(F done) {
  for (int i = 0; i < 300; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

}  // namespace

TEST_CASE("remote_tier_takes_a_stalled_server_out_after_timeout_limit_timeouts_and_back_when_it_answers") {
  // A SIGSTOPped memcached accepts connects (the kernel's backlog) and never
  // answers: without the timeout count every operation on its keys would
  // wait the whole timeout, forever.
  MemcachedServer a, b;
  RemoteTierOptions o = tier_options({a.server(), b.server()});
  o.timeout_limit = 3;
  o.retry_interval = std::chrono::milliseconds(2000);
  // No generation refresh during the test: one that times out on b would be
  // one more of the timeouts counted here.
  o.generation_refresh = std::chrono::hours(1);
  auto tier = open_tier(o);
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 24; ++i) blocks.push_back(make_block(700 + i));
  for (const TestBlock& blk : blocks) tier->put_async(blk.key, blk.record);
  tier->wait_idle();
  REQUIRE(tier->stats().writes == blocks.size());
  std::vector<TestBlock> on_b;
  for (const TestBlock& blk : blocks) {
    if (!server_holds(a.port(), blk.key)) on_b.push_back(blk);
  }
  REQUIRE(on_b.size() >= 4);
  REQUIRE(tier->stats().servers_in_ring == 2);
  REQUIRE(tier->stats().server_ejections == 0);

  b.pause();
  // Reads of b's blocks: each times out (nothing answers in between), and
  // the third takes b out of the ring.
  const RemoteTierStats before = tier->stats();
  size_t n_reads = 0;
  while (n_reads < on_b.size() && state_of(*tier, b).in_ring) {
    const Chain c = chain_of({on_b[n_reads]});
    CHECK(tier->get_chain(c.keys, c.expected).empty());
    ++n_reads;
  }
  const RemoteServerState out = state_of(*tier, b);
  REQUIRE_MESSAGE(!out.in_ring, "b still in the ring after " << n_reads << " timed-out reads");
  CHECK(n_reads == 3);
  CHECK(out.reason == "timed out 3 operations in a row");
  CHECK(out.back_in_ms > 0);
  RemoteTierStats s = tier->stats();
  CHECK(s.timeouts - before.timeouts == 3);
  CHECK(s.server_ejections == 1);
  CHECK(s.servers_in_ring == 1);
  CHECK(state_of(*tier, a).in_ring);

  // Out of the ring, b is not asked: reads of its blocks (now mapped to a)
  // and existence checks miss at once, new writes land on a. No timeout is
  // added as long as b stays out (retry_interval; on a very slow machine it
  // may have come back meanwhile, then nothing is asserted).
  for (size_t i = n_reads; i < on_b.size(); ++i) {
    const Chain c = chain_of({on_b[i]});
    CHECK(tier->get_chain(c.keys, c.expected).empty());
  }
  const Chain b_chain = chain_of(on_b);
  CHECK(tier->present_chain(b_chain.keys, b_chain.keys.size(), std::chrono::seconds(5)) == 0);
  const TestBlock fresh = make_block(800);
  tier->put_async(fresh.key, fresh.record);
  tier->wait_idle();
  if (!state_of(*tier, b).in_ring) {
    CHECK(tier->stats().timeouts == s.timeouts);
    CHECK(server_holds(a.port(), fresh.key));
  }

  // Still stopped when its retry_interval is over: it joins again on
  // probation, and its first timeout takes it out again at once.
  REQUIRE_MESSAGE(wait_for([&] { return state_of(*tier, b).in_ring; }),
                  "b did not join the ring again after retry_interval");
  s = tier->stats();
  const uint64_t ejections = s.server_ejections;
  {
    const Chain c = chain_of({on_b[0]});
    CHECK(tier->get_chain(c.keys, c.expected).empty());
  }
  CHECK(tier->stats().timeouts - s.timeouts == 1);
  CHECK(tier->stats().server_ejections == ejections + 1);
  CHECK_FALSE(state_of(*tier, b).in_ring);
  CHECK(state_of(*tier, b).reason == "timed out again after joining");

  // Answering again: back in the ring after retry_interval, its blocks read
  // back from it.
  b.resume();
  const Chain c = chain_of({on_b[0]});
  REQUIRE_MESSAGE(wait_for([&] {
                    return state_of(*tier, b).in_ring &&
                           tier->get_chain(c.keys, c.expected).size() == 1;
                  }),
                  "b did not come back into the ring after SIGCONT");
  CHECK(tier->stats().servers_in_ring == 2);
  const Chain all = chain_of(blocks);
  CHECK(tier->get_chain(all.keys, all.expected).size() == blocks.size());
  CHECK(tier->present_chain(all.keys, all.keys.size(), std::chrono::seconds(5)) ==
        static_cast<int32_t>(blocks.size()));
}

TEST_CASE("remote_tier_present_chain_counts_leading_blocks_and_leaves_missing_ones_missing") {
  MemcachedServer a, b;
  auto tier = open_tier(tier_options({a.server(), b.server()}));
  std::vector<TestBlock> blocks;
  for (uint64_t i = 0; i < 8; ++i) blocks.push_back(make_block(900 + i));
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i != 5) tier->put_async(blocks[i].key, blocks[i].record);  // block 5 never written
  }
  tier->wait_idle();
  const long items = curr_items(a.port()) + curr_items(b.port());
  REQUIRE(items == 7);
  const Chain c = chain_of(blocks);
  std::string error = "unset";
  CHECK(tier->present_chain(c.keys, c.keys.size(), std::chrono::seconds(5), &error) == 5);
  CHECK(error.empty());
  RemoteTierStats s = tier->stats();
  CHECK(s.lookup_hits == 5);
  CHECK(s.lookup_misses == 3);  // block 5 missing; 6 and 7 not reached
  // max_keys bounds the walk; nothing asked is nothing counted.
  CHECK(tier->present_chain(c.keys, 2, std::chrono::seconds(5)) == 2);
  CHECK(tier->present_chain(c.keys, 0, std::chrono::seconds(5)) == 0);
  s = tier->stats();
  CHECK(s.lookup_hits == 7);
  CHECK(s.lookup_misses == 3);
  // The existence check of the missing key left it missing (memcached keeps
  // an already expired empty item that no get finds): asked again, it still
  // misses, and neither server returns it.
  const Chain missing = chain_of({blocks[5]});
  CHECK(tier->present_chain(missing.keys, 1, std::chrono::seconds(5)) == 0);
  CHECK_FALSE(server_holds(a.port(), blocks[5].key));
  CHECK_FALSE(server_holds(b.port(), blocks[5].key));
  CHECK(tier->get_chain(missing.keys, missing.expected).empty());
  // A lookup reads no values and counts no onboard hits.
  CHECK(s.hits == 0);
  CHECK(s.read_bytes == 0);
  // A server killed: the refused connect takes it out of the ring (failure
  // limit 2 here: two lookups) and the lookup is asked again without it, on
  // the ring where its keys now live: a miss, not an error.
  std::vector<BlockKey> b_first;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i != 5 && server_holds(b.port(), blocks[i].key)) b_first.push_back(blocks[i].key);
  }
  REQUIRE(!b_first.empty());
  b.stop();
  CHECK(tier->present_chain(b_first, 1, std::chrono::seconds(5), &error) == 0);
  CHECK(tier->present_chain(b_first, 1, std::chrono::seconds(5), &error) == 0);
  CHECK_MESSAGE(error.empty(), error);
  CHECK(tier->stats().servers_in_ring == 1);
  // Every server down: a clear error, no hit, and the tier keeps serving.
  a.stop();
  CHECK(tier->present_chain(c.keys, c.keys.size(), std::chrono::seconds(5), &error) == 0);
  CHECK_MESSAGE(error.find("remote cache: failed asking for block 0") == 0, error);
}

TEST_CASE("remote_tier_clear_pool_makes_every_replica_of_the_namespace_miss_within_the_refresh") {
  MemcachedServer a, b;
  RemoteTierOptions o = tier_options({a.server(), b.server()});
  o.pool_namespace = Hash128{0x5EED, 1};
  o.generation_refresh = std::chrono::milliseconds(100);
  auto one = open_tier(o);
  auto two = open_tier(o);  // another replica of the same deployment and model
  RemoteTierOptions other_model = o;
  other_model.pool_namespace = Hash128{0x5EED, 2};
  auto stranger = open_tier(other_model);
  CHECK(one->stats().generation == 0);
  std::vector<TestBlock> blocks, theirs;
  for (uint64_t i = 0; i < 6; ++i) blocks.push_back(make_block(1100 + i));
  for (uint64_t i = 0; i < 3; ++i) theirs.push_back(make_block(1200 + i));
  for (const TestBlock& blk : blocks) one->put_async(blk.key, blk.record);
  for (const TestBlock& blk : theirs) stranger->put_async(blk.key, blk.record);
  one->wait_idle();
  stranger->wait_idle();
  const Chain c = chain_of(blocks);
  const Chain t = chain_of(theirs);
  REQUIRE(two->get_chain(c.keys, c.expected).size() == blocks.size());

  // Cleared by `one`: it misses at once; `two` misses once it has read the
  // new generation (within generation_refresh; waited for with a bound).
  auto g = one->clear_pool();
  REQUIRE_MESSAGE(g.ok(), g.message());
  CHECK(*g == 1);
  CHECK(one->stats().generation == 1);
  CHECK(one->stats().generation_changes == 1);
  CHECK(one->get_chain(c.keys, c.expected).empty());
  CHECK(one->present_chain(c.keys, c.keys.size(), std::chrono::seconds(5)) == 0);
  CHECK(wait_for([&] { return two->get_chain(c.keys, c.expected).empty(); }));
  CHECK(two->stats().generation == 1);
  // Another model's namespace keeps its blocks.
  CHECK(stranger->get_chain(t.keys, t.expected).size() == theirs.size());
  CHECK(stranger->stats().generation == 0);

  // Written again (by `two`, which forgot that it had read them), the blocks
  // are shared under the new generation.
  for (const TestBlock& blk : blocks) two->put_async(blk.key, blk.record);
  two->wait_idle();
  CHECK(two->stats().writes == blocks.size());
  CHECK(one->get_chain(c.keys, c.expected).size() == blocks.size());

  // The counter lost (its server flushed): whoever knows the generation puts
  // it back, never lower, and a replica that starts now reads it.
  for (const MemcachedServer* s : {&a, &b}) {
    ascii_command(s->port(), "delete " + RemoteTier::generation_key(kSecret, o.pool_namespace) + "\r\n",
                  "\r\n");
  }
  CHECK(wait_for([&] {
    (void)one->get_chain(c.keys, c.expected);  // a refresh, when it is due
    auto three = RemoteTier::open(o);
    return three.ok() && (*three)->stats().generation == 1;
  }));
  CHECK(one->get_chain(c.keys, c.expected).size() == blocks.size());
}

TEST_CASE("remote_tier_destructor_drains_the_queue_and_gives_up_behind_a_stalled_server") {
  MemcachedServer a;
  {
    auto tier = open_tier(tier_options({a.server()}));
    for (uint64_t i = 0; i < 20; ++i) tier->put_async(make_block(i).key, make_block(i).record);
  }  // no wait_idle(): the destructor writes them
  CHECK(curr_items(a.port()) == 20);

  auto tier = open_tier(tier_options({a.server()}));
  a.pause();
  for (uint64_t i = 100; i < 150; ++i) tier->put_async(make_block(i).key, make_block(i).record);
  const auto start = Clock::now();
  // A write that times out (200 ms) and more queued: the first timeout at
  // shutdown drops the rest instead of paying 200 ms for each of 50 writes.
  tier.reset();
  CHECK(Clock::now() - start < std::chrono::seconds(5));  // a hang detector
  a.resume();
  CHECK(curr_items(a.port()) < 20 + 50);
}

TEST_CASE("remote_tier_drops_writes_over_the_queue_bound") {
  MemcachedServer a;
  RemoteTierOptions o = tier_options({a.server()});
  const TestBlock first = make_block(1);
  const uint64_t value_bytes = first.record->size() + RecordMac::kTrailerBytes;
  o.max_pending_write_bytes = value_bytes - 1;  // not even one record fits
  auto tier = open_tier(o);
  for (uint64_t i = 0; i < 5; ++i) tier->put_async(make_block(i).key, make_block(i).record);
  tier->wait_idle();
  RemoteTierStats s = tier->stats();
  CHECK(s.writes_dropped == 5);
  CHECK(s.writes == 0);
  CHECK(curr_items(a.port()) == 0);

  // Room for exactly one: the same key twice is queued once.
  o.max_pending_write_bytes = value_bytes;
  auto one = open_tier(o);
  one->put_async(first.key, first.record);
  one->put_async(first.key, first.record);
  one->wait_idle();
  s = one->stats();
  CHECK(s.writes == 1);
  CHECK(s.writes_dropped == 0);  // the duplicate is skipped: its key is queued or being written
}

int main(int argc, char** argv) {
  if (!memcached_installed()) {
    std::printf(
        "skipped: %s is not installed (Debian package memcached; scripts/setup.sh "
        "installs it with PREFIXD_WITH_TEST_TOOLS=1)\n",
        kMemcachedBinary);
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
