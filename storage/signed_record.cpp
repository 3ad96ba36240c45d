// Signed records: splitting, signing and checking the disk and remote tiers'
// stored values (see signed_record.h).
#include "storage/signed_record.h"

#include <algorithm>

namespace prefixd {

std::optional<SignedValue> split_signed_value(std::span<const uint8_t> value) {
  if (value.size() <= RecordMac::kTrailerBytes) return std::nullopt;
  const size_t record_bytes = value.size() - RecordMac::kTrailerBytes;
  return SignedValue{value.first(record_bytes),
                     value.subspan(record_bytes).first<RecordMac::kTrailerBytes>()};
}

std::vector<uint8_t> sign_record_value(const RecordMac& mac, std::span<const uint8_t> record) {
  const RecordMac::Trailer trailer = mac.sign(record);
  std::vector<uint8_t> value(record.size() + trailer.size());
  std::copy(record.begin(), record.end(), value.begin());
  std::copy(trailer.begin(), trailer.end(), value.begin() + static_cast<ptrdiff_t>(record.size()));
  return value;
}

SignedRecordCheck verify_signed_record(const RecordMac& mac, std::span<const uint8_t> record,
                                       std::span<const uint8_t, RecordMac::kTrailerBytes> trailer,
                                       const BlockKey& key, const RecordExpectations* expected,
                                       BlockRecordView* view) {
  SignedRecordCheck result;
  result.authentic = mac.verify(record, trailer);
  if (!result.authentic) return result;
  BlockRecordView parsed;
  result.check = expected != nullptr
                     ? check_block_record(record.data(), record.size(), *expected, &parsed)
                     : check_block_record_integrity(record.data(), record.size(), &parsed);
  if (result.check == RecordCheck::kOk && (parsed.info.namespace_seed != key.namespace_seed ||
                                           parsed.info.block_hash != key.block_hash)) {
    result.check = RecordCheck::kBlockHash;
  }
  if (result.ok() && view != nullptr) *view = parsed;
  return result;
}

SignedRecordCheck verify_signed_record(const RecordMac& mac, std::span<const uint8_t> value,
                                       const BlockKey& key, const RecordExpectations* expected,
                                       BlockRecordView* view) {
  const std::optional<SignedValue> parts = split_signed_value(value);
  if (!parts) return SignedRecordCheck{};
  return verify_signed_record(mac, parts->record, parts->trailer, key, expected, view);
}

}  // namespace prefixd
