#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/json_util.h"

namespace moeserve::engine {
namespace {

using nlohmann::json;

// Largest dimension accepted; keeps numel products far from overflow checks
// being the only guard and makes messages readable.
constexpr int64_t kMaxDim = int64_t{1} << 40;

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string TensorPrefix(absl::string_view path, absl::string_view tensor) {
  return absl::StrCat(path, ": tensor \"", tensor, "\": ");
}

absl::Status ParseShape(const json& j, absl::string_view prefix,
                        std::vector<int64_t>* shape) {
  if (!j.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "\"shape\" must be an array"));
  }
  for (const json& d : j) {
    std::optional<int64_t> v = json_util::AsInt64(d);
    if (!v || *v < 0 || *v > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "\"shape\" entries must be integers in [0, 2^40]"));
    }
    shape->push_back(*v);
  }
  return absl::OkStatus();
}

absl::Status ParseOffsets(const json& j, absl::string_view prefix,
                          uint64_t data_size, uint64_t* begin, uint64_t* end) {
  if (!j.is_array() || j.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "\"data_offsets\" must be [begin, end]"));
  }
  std::optional<int64_t> b = json_util::AsInt64(j[0]);
  std::optional<int64_t> e = json_util::AsInt64(j[1]);
  if (!b || !e || *b < 0 || *e < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "\"data_offsets\" must be non-negative integers"));
  }
  if (*b > *e) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "data_offsets begin ", *b, " > end ", *e));
  }
  if (static_cast<uint64_t>(*e) > data_size) {
    return absl::DataLossError(absl::StrCat(prefix, "data_offsets end ", *e,
                                            " out of range: data region is ",
                                            data_size, " bytes"));
  }
  *begin = static_cast<uint64_t>(*b);
  *end = static_cast<uint64_t>(*e);
  return absl::OkStatus();
}

// Checks numel(shape) * dsize == byte_size, with overflow checks.
absl::Status CheckByteSize(const TensorInfo& t, absl::string_view prefix) {
  uint64_t bytes = DTypeSize(t.dtype);
  for (int64_t d : t.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "shape size overflows"));
    }
  }
  if (bytes != t.byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "shape/byte size mismatch: shape and dtype ",
                     DTypeName(t.dtype), " need ", bytes,
                     " bytes, data_offsets span ", t.byte_size));
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(const json& j, absl::string_view path,
                           std::map<std::string, std::string>* out) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"__metadata__\" must be an object"));
  }
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": \"__metadata__\" value for \"", k, "\" must be a string"));
    }
    (*out)[k] = v.get<std::string>();
  }
  return absl::OkStatus();
}

// Refuses overlapping non-empty regions.
absl::Status CheckNoOverlap(std::vector<const TensorInfo*> ts,
                            absl::string_view path) {
  std::sort(ts.begin(), ts.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->file_offset < b->file_offset;
  });
  uint64_t max_end = 0;
  const TensorInfo* max_owner = nullptr;
  for (const TensorInfo* t : ts) {
    if (t->byte_size == 0) continue;
    if (max_owner != nullptr && t->file_offset < max_end) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(path, t->name), "data overlaps tensor \"",
                       max_owner->name, "\""));
    }
    max_end = t->file_offset + t->byte_size;
    max_owner = t;
  }
  return absl::OkStatus();
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile(path));
  // Refuses a FIFO or device at once (its open would block for a writer).
  absl::StatusOr<int> fd = json_util::OpenRegularFile(path);
  if (!fd.ok()) return fd.status();
  f->fd_ = *fd;
  struct stat st;
  if (fstat(f->fd_, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat"));
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
    if (m == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat(path, ": mmap failed: ", strerror(errno)));
    }
    f->mapping_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
  }
  if (absl::Status s = f->Parse(); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(
    absl::string_view bytes, std::string name) {
  std::unique_ptr<char[]> copy(new char[bytes.size()]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  return FromOwnedBuffer(std::move(copy), bytes.size(), std::move(name));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::FromOwnedBuffer(std::unique_ptr<char[]> bytes, uint64_t size,
                                 std::string name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile(std::move(name)));
  f->owned_ = std::move(bytes);
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.get());
  f->size_ = size;
  if (absl::Status s = f->Parse(); !s.ok()) return s;
  return f;
}

absl::Status SafetensorsFile::Parse() {
  if (size_ < 8) {
    return absl::DataLossError(
        absl::StrCat(path_, ": truncated: file is ", size_,
                     " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t n = ReadLe64(base_);
  if (n > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header length ", n,
                                                   " exceeds the limit of ",
                                                   kMaxHeaderBytes));
  }
  if (n > size_ - 8) {
    return absl::DataLossError(absl::StrCat(path_, ": header length ", n,
                                            " beyond file size ", size_));
  }
  absl::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
  absl::StatusOr<json> header =
      json_util::Parse(text, absl::StrCat(path_, ": header"));
  if (!header.ok()) return header.status();
  if (!header->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header is not a JSON object"));
  }
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size_ - data_start;
  std::vector<const TensorInfo*> all;
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") {
      if (absl::Status s = ParseMetadata(value, path_, &metadata_); !s.ok()) {
        return s;
      }
      continue;
    }
    const std::string prefix = TensorPrefix(path_, name);
    if (!value.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "not an object"));
    }
    TensorInfo t;
    t.name = name;
    auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "missing or non-string \"dtype\""));
    }
    std::optional<DType> dtype = ParseDType(dt->get<std::string>());
    if (!dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "unsupported dtype \"", dt->get<std::string>(), "\""));
    }
    t.dtype = *dtype;
    auto sh = value.find("shape");
    if (sh == value.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "missing \"shape\""));
    }
    if (absl::Status s = ParseShape(*sh, prefix, &t.shape); !s.ok()) return s;
    auto off = value.find("data_offsets");
    if (off == value.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "missing \"data_offsets\""));
    }
    uint64_t begin = 0, end = 0;
    if (absl::Status s = ParseOffsets(*off, prefix, data_size, &begin, &end);
        !s.ok()) {
      return s;
    }
    t.byte_size = end - begin;
    t.file_offset = data_start + begin;
    t.data = base_ + t.file_offset;
    if (absl::Status s = CheckByteSize(t, prefix); !s.ok()) return s;
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    all.push_back(&it->second);
  }
  return CheckNoOverlap(std::move(all), path_);
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace moeserve::engine
