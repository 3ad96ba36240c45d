// Loading libcudnn.so.9 with dlopen and checking its version (cudnn_api.h).
#include "kernels/cuda/cudnn/cudnn_api.h"
#include "kernels/cuda/cudnn/cudnn_search.h"

#include <dlfcn.h>
#include <link.h>

#include <filesystem>

namespace prefixd::cuda {
namespace {

// Sub-libraries that libcudnn.so.9 opens by name when the backend API is
// first used; `required` ones are what the attention graph needs (the graph
// library, and the runtime-compiled engines that fuse it).
struct SubLibrary {
  const char* name;
  bool required;
};
constexpr SubLibrary kSubLibraries[] = {
    {"libcudnn_graph.so.9", true},
    {"libcudnn_engines_runtime_compiled.so.9", true},
    {"libcudnn_engines_precompiled.so.9", false},
    {"libcudnn_heuristic.so.9", false},
};

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// The folder libcudnn.so.9 was loaded from ("" when the loader does not say).
std::string loaded_folder(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return "";
  return std::filesystem::path(map->l_name).parent_path().string();
}

template <typename F>
bool bind(void* handle, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *fn != nullptr;
}

// Handles opened for one candidate, closed again when it is not taken.
struct OpenedLibraries {
  std::vector<void*> handles;
  void close_all() {
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) dlclose(*it);
    handles.clear();
  }
};

Result<std::shared_ptr<const CudnnApi>> load_one(const std::string& candidate, OpenedLibraries* opened) {
  void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Status::error(dl_error());
  opened->handles.push_back(lib);
  auto api = std::make_shared<CudnnApi>();
  std::string missing;
  bind(lib, "cudnnGetVersion", &api->GetVersion, &missing);
  if (api->GetVersion == nullptr) return Status::error("no cudnnGetVersion: not a cuDNN library");
  api->version = api->GetVersion();
  if (Status s = check_cudnn_version(api->version); !s.ok()) return s;
  const std::string folder = loaded_folder(lib);
  api->library = folder.empty() ? candidate : (std::filesystem::path(folder) / kCudnnLibrary).string();
  for (const SubLibrary& sub : kSubLibraries) {
    const std::string path = folder.empty() ? sub.name : (std::filesystem::path(folder) / sub.name).string();
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      opened->handles.push_back(h);
    } else if (sub.required) {
      return Status::error("cuDNN " + api->version_string() + " in " + (folder.empty() ? "the library path" : folder) +
                           " lacks " + sub.name + ": " + dl_error());
    }
  }
  bind(lib, "cudnnGetErrorString", &api->GetErrorString, &missing);
  bind(lib, "cudnnGetLastErrorString", &api->GetLastErrorString, &missing);
  bind(lib, "cudnnCreate", &api->Create, &missing);
  bind(lib, "cudnnDestroy", &api->Destroy, &missing);
  bind(lib, "cudnnSetStream", &api->SetStream, &missing);
  bind(lib, "cudnnBackendCreateDescriptor", &api->BackendCreateDescriptor, &missing);
  bind(lib, "cudnnBackendDestroyDescriptor", &api->BackendDestroyDescriptor, &missing);
  bind(lib, "cudnnBackendSetAttribute", &api->BackendSetAttribute, &missing);
  bind(lib, "cudnnBackendGetAttribute", &api->BackendGetAttribute, &missing);
  bind(lib, "cudnnBackendFinalize", &api->BackendFinalize, &missing);
  bind(lib, "cudnnBackendExecute", &api->BackendExecute, &missing);
  if (!missing.empty()) return Status::error("cuDNN " + api->version_string() + " lacks " + missing);
  return std::shared_ptr<const CudnnApi>(std::move(api));
}

}  // namespace

std::string cudnn_version_string(size_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string CudnnApi::version_string() const { return cudnn_version_string(version); }

std::string CudnnApi::describe(cudnnStatus_t status, const std::string& what) const {
  std::string out = what + ": " + (GetErrorString != nullptr ? GetErrorString(status) : std::to_string(status));
  if (GetLastErrorString != nullptr) {
    char buf[1024] = {0};
    GetLastErrorString(buf, sizeof(buf));
    if (buf[0] != '\0') out += std::string(": ") + buf;
  }
  return out;
}

Status check_cudnn_version(size_t version) {
  const std::string v = cudnn_version_string(version);
  if (version / 10000 != 9)
    return Status::error("cuDNN " + v + " is not a 9.x release (libcudnn.so.9 is required)");
  if (version < kCudnnMinVersion)
    return Status::error("cuDNN " + v + " has no paged cache load operation (needs 9.5.0 or newer)");
  if (version == 91000 || version == 91001)
    return Status::error("cuDNN " + v + " has known attention forward bugs (use 9.10.2 or newer)");
  return Status::ok_status();
}

Result<std::shared_ptr<const CudnnApi>> load_cudnn(const std::vector<std::string>& candidates) {
  if (candidates.empty()) return Status::error("no cuDNN library to try");
  std::string tried;
  for (const std::string& c : candidates) {
    OpenedLibraries opened;
    Result<std::shared_ptr<const CudnnApi>> api = load_one(c, &opened);
    if (api.ok()) return api;  // its handles stay open for the process
    opened.close_all();
    tried += (tried.empty() ? "" : "; ") + c + ": " + api.message();
  }
  return Status::error("no usable cuDNN (" + tried + ")");
}

}  // namespace prefixd::cuda
