// Tests for RecordMac and the signed-record check the disk and remote tiers
// share (storage/signed_record.h): split, sign, verify; every refusal names
// whether the MAC or a record check failed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "storage/record_mac.h"
#include "storage/signed_record.h"
#include "tests/test_blocks.h"

using namespace prefixd;
using namespace prefixd::testing;  // TestBlock, make_block, kGeom, kFingerprint

namespace {

std::array<uint8_t, 16> secret_of(uint8_t first) {
  std::array<uint8_t, 16> secret{};
  secret[0] = first;
  return secret;
}

}  // namespace

TEST_CASE("record_mac_tags_differ_per_record_and_catch_every_flipped_bit_tried") {
  std::array<uint8_t, 16> secret{};
  secret[0] = 1;
  RecordMac mac(secret);
  const TestBlock b = make_block(10);
  const RecordMac::Trailer t1 = mac.sign(b.record->bytes());
  const RecordMac::Trailer t2 = mac.sign(b.record->bytes());
  CHECK(t1 != t2);  // fresh nonce each time
  CHECK(mac.verify(b.record->bytes(), t1));
  CHECK(mac.verify(b.record->bytes(), t2));
  std::vector<uint8_t> bytes(b.record->data(), b.record->data() + b.record->size());
  for (size_t i = 0; i < bytes.size(); i += 37) {
    bytes[i] ^= 0x80;
    CHECK_FALSE(mac.verify(bytes, t1));
    bytes[i] ^= 0x80;
  }
  RecordMac::Trailer bad = t1;
  bad[RecordMac::kTrailerBytes - 1] ^= 1;
  CHECK_FALSE(mac.verify(b.record->bytes(), bad));
  bad = t1;
  bad[0] ^= 1;  // another nonce: another one-time key
  CHECK_FALSE(mac.verify(b.record->bytes(), bad));
}

TEST_CASE("split_signed_value_needs_a_trailer_and_one_record_byte") {
  std::vector<uint8_t> value(RecordMac::kTrailerBytes, 7);
  CHECK_FALSE(split_signed_value(value).has_value());
  CHECK_FALSE(split_signed_value({}).has_value());
  value.push_back(9);
  const auto parts = split_signed_value(value);
  REQUIRE(parts.has_value());
  CHECK(parts->record.size() == 1);
  CHECK(parts->record.data() == value.data());
  CHECK(parts->trailer.data() == value.data() + 1);
}

TEST_CASE("a_signed_value_verifies_with_and_without_expectations_and_fills_the_view") {
  RecordMac mac(secret_of(1));
  const TestBlock b = make_block(3);
  const std::vector<uint8_t> value = sign_record_value(mac, b.record->bytes());
  REQUIRE(value.size() == b.record->size() + RecordMac::kTrailerBytes);
  CHECK(std::equal(b.record->data(), b.record->data() + b.record->size(), value.begin()));
  const RecordExpectations e = b.expect();
  BlockRecordView view;
  SignedRecordCheck check = verify_signed_record(mac, value, b.key, &e, &view);
  CHECK(check.authentic);
  CHECK(check.check == RecordCheck::kOk);
  CHECK(check.ok());
  CHECK(view.info.block_hash == b.key.block_hash);
  CHECK(view.info.namespace_seed == b.key.namespace_seed);
  CHECK(view.token(0) == 3);
  check = verify_signed_record(mac, value, b.key, nullptr);
  CHECK(check.ok());
  // The split form gives the same answer on the parts of the value.
  const auto parts = split_signed_value(value);
  REQUIRE(parts.has_value());
  CHECK(verify_signed_record(mac, parts->record, parts->trailer, b.key, &e).ok());
}

TEST_CASE("a_value_too_short_or_signed_under_another_secret_is_not_authentic") {
  RecordMac mac(secret_of(1));
  RecordMac other(secret_of(2));
  const TestBlock b = make_block(4);
  const RecordExpectations e = b.expect();
  SignedRecordCheck check = verify_signed_record(mac, b.record->bytes(), b.key, &e);  // no trailer
  CHECK_FALSE(check.authentic);
  CHECK_FALSE(check.ok());
  check = verify_signed_record(mac, std::vector<uint8_t>(RecordMac::kTrailerBytes), b.key, &e);
  CHECK_FALSE(check.authentic);
  check = verify_signed_record(mac, sign_record_value(other, b.record->bytes()), b.key, &e);
  CHECK_FALSE(check.authentic);
  CHECK_FALSE(check.ok());
}

TEST_CASE("an_authentic_record_that_fails_a_record_check_names_the_check") {
  RecordMac mac(secret_of(1));
  const TestBlock b = make_block(5);
  const TestBlock other = make_block(6);
  const RecordExpectations e = b.expect();
  SUBCASE("damaged payload, signed after the damage: the checksum, not the MAC") {
    std::vector<uint8_t> bytes(b.record->data(), b.record->data() + b.record->size());
    bytes[400] ^= 0x01;
    const SignedRecordCheck check = verify_signed_record(mac, sign_record_value(mac, bytes), b.key, nullptr);
    CHECK(check.authentic);
    CHECK(check.check == RecordCheck::kPayloadChecksum);
    CHECK_FALSE(check.ok());
  }
  SUBCASE("another block's record under this key: kBlockHash, with or without expectations") {
    const std::vector<uint8_t> value = sign_record_value(mac, other.record->bytes());
    SignedRecordCheck check = verify_signed_record(mac, value, b.key, nullptr);
    CHECK(check.authentic);
    CHECK(check.check == RecordCheck::kBlockHash);
    check = verify_signed_record(mac, value, b.key, &e);
    CHECK(check.authentic);
    CHECK(check.check == RecordCheck::kBlockHash);
  }
  SUBCASE("the right block hash under another namespace seed: kBlockHash") {
    const BlockKey moved{b.key.namespace_seed + 1, b.key.block_hash};
    const SignedRecordCheck check =
        verify_signed_record(mac, sign_record_value(mac, b.record->bytes()), moved, nullptr);
    CHECK(check.authentic);
    CHECK(check.check == RecordCheck::kBlockHash);
  }
  SUBCASE("other tokens expected: kTokens") {
    RecordExpectations wrong = e;
    const std::vector<int32_t> tokens = {5, 1, 2, 4};
    wrong.token_ids = tokens;
    const SignedRecordCheck check =
        verify_signed_record(mac, sign_record_value(mac, b.record->bytes()), b.key, &wrong);
    CHECK(check.authentic);
    CHECK(check.check == RecordCheck::kTokens);
  }
}
