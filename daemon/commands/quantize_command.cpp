// `prefixd quantize`: runs quantize_model and prints its report.
#include "daemon/commands/quantize_command.h"

#include <cstdio>

namespace prefixd {

std::string format_quantize_report(const QuantizeReport& r) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-8s %8s %14s %12s %12s\n", "type", "tensors", "bytes",
                "rel_rms_err", "max_abs_err");
  out += line;
  int64_t n_tensors = 0;
  for (const QuantizeTypeStats& s : r.by_type) {
    std::snprintf(line, sizeof(line), "%-8s %8lld %14llu %12.6f %12.6f\n", weight_type_name(s.type),
                  static_cast<long long>(s.n_tensors), static_cast<unsigned long long>(s.n_bytes),
                  s.rel_rms_error(), s.max_abs_error);
    out += line;
    n_tensors += s.n_tensors;
  }
  std::snprintf(line, sizeof(line),
                "%-8s %8lld %14llu   (input %llu bytes; %s, general.file_type %u)\n", "total",
                static_cast<long long>(n_tensors),
                static_cast<unsigned long long>(r.out_tensor_bytes),
                static_cast<unsigned long long>(r.in_tensor_bytes), r.mix.c_str(), r.file_type);
  out += line;
  return out;
}

int run_quantize(const QuantizeOptions& opts) {
  QuantizeReport report;
  Status s = quantize_model(opts.in_path, opts.out_path, opts.type_name, &report);
  if (!s.ok()) {
    std::fprintf(stderr, "prefixd quantize: %s\n", s.message().c_str());
    return 2;
  }
  std::printf("wrote %s\n%s", opts.out_path.c_str(), format_quantize_report(report).c_str());
  return 0;
}

}  // namespace prefixd
