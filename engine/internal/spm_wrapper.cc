// Calls sentencepiece through the libmoeserve_spm.so plugin (see
// spm_plugin.cc for why it is loaded privately).
#include "engine/internal/spm_wrapper.h"

#include <dlfcn.h>

#include <mutex>

#include "base/plugin_loader.h"

namespace moeserve::engine::internal {
namespace {

constexpr char kPluginName[] = "libmoeserve_spm.so";

// The plugin's entry points, resolved once per process.
struct PluginApi {
  void* (*create)() = nullptr;
  void (*destroy)(void*) = nullptr;
  bool (*load)(void*, const std::string*, std::string*) = nullptr;
  bool (*encode)(const void*, const std::string*, std::vector<int>*,
                 std::string*) = nullptr;
  bool (*decode)(const void*, const std::vector<int>*, std::string*,
                 std::string*) = nullptr;
  void (*id_to_piece)(const void*, int, std::string*) = nullptr;
  int (*special)(const void*, int) = nullptr;
  bool (*is)(const void*, int, int) = nullptr;
  std::string error;  // non-empty when the plugin could not be loaded
};

template <typename F>
bool Resolve(void* handle, const char* name, F* fn, std::string* error) {
  *fn = reinterpret_cast<F>(base::PluginSymbol(handle, name, error));
  return *fn != nullptr;
}

// GCC defines __SANITIZE_*__; clang before 15 only answers __has_feature
// (the libFuzzer targets, tests/fuzz/run_fuzzers.sh, are built with clang).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MOESERVE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MOESERVE_SANITIZED 1
#endif
#endif

PluginApi LoadPlugin() {
  PluginApi api;
  // ASan refuses RTLD_DEEPBIND; sanitized test binaries do not link
  // protobuf next to the tokenizer, so local binding alone suffices there.
#ifdef MOESERVE_SANITIZED
  constexpr int kFlags = RTLD_NOW | RTLD_LOCAL;
#else
  constexpr int kFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
  void* handle = base::OpenPlugin({.file = kPluginName,
                                   .package_dir = "engine",
                                   .env_var = "MOESERVE_SPM_PLUGIN",
                                   .dlopen_flags = kFlags},
                                  &api.error);
  if (handle == nullptr) return api;
  std::string& e = api.error;
  Resolve(handle, "moeserve_spm_new", &api.create, &e) &&
      Resolve(handle, "moeserve_spm_delete", &api.destroy, &e) &&
      Resolve(handle, "moeserve_spm_load", &api.load, &e) &&
      Resolve(handle, "moeserve_spm_encode", &api.encode, &e) &&
      Resolve(handle, "moeserve_spm_decode", &api.decode, &e) &&
      Resolve(handle, "moeserve_spm_id_to_piece", &api.id_to_piece, &e) &&
      Resolve(handle, "moeserve_spm_special", &api.special, &e) &&
      Resolve(handle, "moeserve_spm_is", &api.is, &e);
  return api;  // the handle stays open for the life of the process
}

const PluginApi& Api() {
  static const PluginApi* api = new PluginApi(LoadPlugin());
  return *api;
}

}  // namespace

struct SpmWrapper::Impl {
  void* processor = nullptr;
  ~Impl() {
    if (processor != nullptr) Api().destroy(processor);
  }
};

SpmWrapper::SpmWrapper() : impl_(std::make_unique<Impl>()) {}
SpmWrapper::~SpmWrapper() = default;

bool SpmWrapper::Load(const std::string& path, std::string* error) {
  if (!Api().error.empty()) {
    *error = Api().error;
    return false;
  }
  if (impl_->processor == nullptr) impl_->processor = Api().create();
  return Api().load(impl_->processor, &path, error);
}

bool SpmWrapper::Encode(const std::string& text, std::vector<int>* ids,
                        std::string* error) const {
  return Api().encode(impl_->processor, &text, ids, error);
}

bool SpmWrapper::Decode(const std::vector<int>& ids, std::string* text,
                        std::string* error) const {
  return Api().decode(impl_->processor, &ids, text, error);
}

std::string SpmWrapper::IdToPiece(int id) const {
  std::string piece;
  Api().id_to_piece(impl_->processor, id, &piece);
  return piece;
}
int SpmWrapper::vocab_size() const {
  return Api().special(impl_->processor, 0);
}
int SpmWrapper::bos_id() const { return Api().special(impl_->processor, 1); }
int SpmWrapper::eos_id() const { return Api().special(impl_->processor, 2); }
int SpmWrapper::unk_id() const { return Api().special(impl_->processor, 3); }
bool SpmWrapper::IsControl(int id) const {
  return Api().is(impl_->processor, id, 0);
}
bool SpmWrapper::IsByte(int id) const {
  return Api().is(impl_->processor, id, 1);
}

}  // namespace moeserve::engine::internal
