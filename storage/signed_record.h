// Signed records: the value the disk and remote tiers store, record ||
// RecordMac trailer, and the one check a value read back passes before any of
// its bytes are served (MAC, record checks, the key it was asked under).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "storage/block_record.h"
#include "storage/record_mac.h"

namespace prefixd {

// A stored value split into its parts; both spans alias the value.
struct SignedValue {
  std::span<const uint8_t> record;                                // [value bytes - trailer]
  std::span<const uint8_t, RecordMac::kTrailerBytes> trailer;     // nonce || tag
};

// Splits value = record || trailer. nullopt when the value is too short to
// hold a trailer and at least one record byte (such a value is a forgery).
std::optional<SignedValue> split_signed_value(std::span<const uint8_t> value);

// record || mac.sign(record): the bytes a tier stores for `record`.
std::vector<uint8_t> sign_record_value(const RecordMac& mac, std::span<const uint8_t> record);

// What a signed record's check found. ok() only when the MAC verified and
// every record check passed.
struct SignedRecordCheck {
  bool authentic = false;               // the trailer authenticates the record
  RecordCheck check = RecordCheck::kOk;  // meaningful only when authentic
  bool ok() const { return authentic && check == RecordCheck::kOk; }
};

// The MAC first (nothing else is read from bytes that did not come from a
// holder of the key), then the record: check_block_record against `expected`
// when not null, else check_block_record_integrity; then that the record
// names `key` (namespace seed and block hash), kBlockHash when it does not.
// Fills *view on ok() when view is not null. Thread-safe (RecordMac is).
SignedRecordCheck verify_signed_record(const RecordMac& mac, std::span<const uint8_t> record,
                                       std::span<const uint8_t, RecordMac::kTrailerBytes> trailer,
                                       const BlockKey& key, const RecordExpectations* expected,
                                       BlockRecordView* view = nullptr);
// The same on a whole stored value (split_signed_value first; a value too
// short for a trailer is not authentic).
SignedRecordCheck verify_signed_record(const RecordMac& mac, std::span<const uint8_t> value,
                                       const BlockKey& key, const RecordExpectations* expected,
                                       BlockRecordView* view = nullptr);

}  // namespace prefixd
