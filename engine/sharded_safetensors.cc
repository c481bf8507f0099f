// ShardedSafetensors (declared in safetensors.h): the shards of one model.

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/json_util.h"
#include "engine/safetensors.h"

namespace moeserve::engine {
namespace {

using nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// A shard name must be a plain file name inside the model directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos;
}

// Parses the index's weight_map into tensor name -> shard file name.
absl::StatusOr<std::map<std::string, std::string>> ParseWeightMap(
    const std::string& index_path) {
  absl::StatusOr<std::string> text = json_util::ReadFileText(index_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<json> j = json_util::Parse(*text, index_path);
  if (!j.ok()) return j.status();
  if (!j->is_object() || !j->contains("weight_map") ||
      !(*j)["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": missing object field \"weight_map\""));
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : (*j)["weight_map"].items()) {
    if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry for \"", name,
                       "\" must be a file name in the model directory"));
    }
    map[name] = file.get<std::string>();
  }
  return map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedSafetensors>> ShardedSafetensors::Open(
    const std::string& model_dir) {
  const std::string index_path = absl::StrCat(model_dir, "/", kIndexFile);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  if (!json_util::FileExists(index_path)) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(absl::StrCat(model_dir, "/", kSingleFile));
    if (!f.ok()) return f.status();
    files.push_back(*std::move(f));
    return FromFiles(std::move(files));
  }
  absl::StatusOr<std::map<std::string, std::string>> map =
      ParseWeightMap(index_path);
  if (!map.ok()) return map.status();
  std::set<std::string> shard_names;
  for (const auto& [tensor, file] : *map) shard_names.insert(file);
  for (const std::string& name : shard_names) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(absl::StrCat(model_dir, "/", name));
    if (!f.ok()) return f.status();
    files.push_back(*std::move(f));
  }
  absl::StatusOr<std::unique_ptr<ShardedSafetensors>> sharded =
      FromFiles(std::move(files));
  if (!sharded.ok()) return sharded.status();
  for (const auto& [tensor, file] : *map) {
    std::optional<Located> loc = (*sharded)->Find(tensor);
    const std::string want = absl::StrCat(model_dir, "/", file);
    if (!loc || (*sharded)->shard(loc->shard).path() != want) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor \"", tensor,
                                              "\" is not in ", want,
                                              " as the weight_map says"));
    }
  }
  return sharded;
}

absl::StatusOr<std::unique_ptr<ShardedSafetensors>>
ShardedSafetensors::FromFiles(
    std::vector<std::unique_ptr<SafetensorsFile>> files) {
  std::unique_ptr<ShardedSafetensors> s(new ShardedSafetensors());
  s->files_ = std::move(files);
  if (absl::Status st = s->Index(); !st.ok()) return st;
  return s;
}

absl::Status ShardedSafetensors::Index() {
  for (int i = 0; i < num_shards(); ++i) {
    for (const std::string& name : files_[i]->TensorNames()) {
      auto [it, inserted] =
          by_name_.emplace(name, Located{files_[i]->Find(name), i});
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor \"", name, "\" appears in two shards: ",
            files_[it->second.shard]->path(), " and ", files_[i]->path()));
      }
    }
  }
  return absl::OkStatus();
}

std::optional<ShardedSafetensors::Located> ShardedSafetensors::Find(
    absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ShardedSafetensors::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, loc] : by_name_) names.push_back(name);
  return names;
}

}  // namespace moeserve::engine
