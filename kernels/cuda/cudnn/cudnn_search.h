// Where the CUDA backend looks for cuDNN at run time: the ordered list of
// libcudnn.so.9 candidates that cudnn_api.cpp tries with dlopen. Pure C++
// (no cuDNN or CUDA headers) so CPU tests check the order on a temporary tree.
//
// Order: an operator-named path alone (a file, or a directory holding
// libcudnn.so.9; "off" loads nothing); otherwise the dynamic loader's own
// search (LD_LIBRARY_PATH, the ld.so cache: bare "libcudnn.so.9"), then the
// `nvidia/cudnn/lib` folder of Python environments (where PyTorch's pip
// packages put it): for each prefix in `python_prefixes` (the daemon passes
// $VIRTUAL_ENV, $CONDA_PREFIX, the environment of the first python3 on
// $PATH and ~/.local, in that order), then /usr/local and /usr, every
// <prefix>/lib/python3*/{site,dist}-packages that has one.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace prefixd::cuda {

inline constexpr const char* kCudnnLibrary = "libcudnn.so.9";
inline constexpr const char* kCudnnOff = "off";
inline constexpr const char* kCudnnAuto = "auto";  // --cudnn-lib auto: search (explicit_lib empty)

struct CudnnSearch {
  std::string explicit_lib;                  // --cudnn-lib / PREFIXD_CUDNN_LIB; empty: search
  std::vector<std::string> python_prefixes;  // searched before /usr/local and /usr
  std::vector<std::string> system_prefixes = {"/usr/local", "/usr"};
};

inline bool cudnn_disabled(const CudnnSearch& s) { return s.explicit_lib == kCudnnOff; }

// <prefix>/lib/python3*/{site,dist}-packages/nvidia/cudnn/lib/libcudnn.so.9
// that exist, Python versions in name order (site-packages before dist-packages).
inline std::vector<std::string> python_cudnn_libraries(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  if (prefix.empty()) return found;
  std::error_code ec;
  const fs::path lib = fs::path(prefix) / "lib";
  std::vector<std::string> pythons;
  for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("python3", 0) == 0) pythons.push_back(name);
  }
  std::sort(pythons.begin(), pythons.end());
  for (const std::string& py : pythons) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      const fs::path so = lib / py / packages / "nvidia" / "cudnn" / "lib" / kCudnnLibrary;
      if (fs::exists(so, ec)) found.push_back(so.string());
    }
  }
  return found;
}

// The environment prefix of the first `python3` on a PATH-style list
// ("/opt/venv/bin:/usr/bin" -> "/opt/venv" when /opt/venv/bin/python3
// exists; symbolic links are not followed: a virtual environment's python3
// links out of it). "" when none is found.
inline std::string python_prefix_on_path(const std::string& path_env) {
  namespace fs = std::filesystem;
  size_t start = 0;
  while (start <= path_env.size()) {
    const size_t end = std::min(path_env.find(':', start), path_env.size());
    const std::string dir = path_env.substr(start, end - start);
    std::error_code ec;
    if (!dir.empty() && fs::exists(fs::path(dir) / "python3", ec)) {
      const fs::path bin = fs::path(dir).lexically_normal();
      return (bin.filename().empty() ? bin.parent_path().parent_path() : bin.parent_path()).string();
    }
    start = end + 1;
  }
  return "";
}

// The candidates to dlopen, in order (empty when cuDNN is off).
inline std::vector<std::string> cudnn_library_candidates(const CudnnSearch& s) {
  namespace fs = std::filesystem;
  if (cudnn_disabled(s)) return {};
  if (!s.explicit_lib.empty()) {
    std::error_code ec;
    if (fs::is_directory(s.explicit_lib, ec)) return {(fs::path(s.explicit_lib) / kCudnnLibrary).string()};
    return {s.explicit_lib};
  }
  std::vector<std::string> out = {kCudnnLibrary};
  auto add_prefix = [&](const std::string& prefix) {
    for (std::string& so : python_cudnn_libraries(prefix))
      if (std::find(out.begin(), out.end(), so) == out.end()) out.push_back(std::move(so));
  };
  for (const std::string& p : s.python_prefixes) add_prefix(p);
  for (const std::string& p : s.system_prefixes) add_prefix(p);
  return out;
}

}  // namespace prefixd::cuda
