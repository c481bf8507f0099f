#ifndef MOESERVE_ENGINE_JSON_UTIL_H_
#define MOESERVE_ENGINE_JSON_UTIL_H_

// Exception-free helpers around nlohmann::json for the parsers in engine/.
//
// nlohmann::json reports errors by throwing; these helpers are the boundary:
// they parse with exceptions disabled, bound the nesting depth (the parser is
// recursive, so a hostile "[[[[..." would otherwise overflow the stack), and
// read typed fields with checks instead of get<T>(). Every error names the
// field. Thread-safe (pure functions).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::json_util {

// Deepest nesting of arrays/objects accepted by Parse.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as JSON. `what` names the source in error messages.
// Errors: InvalidArgument (not JSON, or nested deeper than kMaxJsonDepth).
absl::StatusOr<nlohmann::json> Parse(absl::string_view text,
                                     absl::string_view what);

// Reads integer `key` from object `obj`. Missing -> NotFound-style
// InvalidArgument "missing field"; wrong type -> InvalidArgument.
// When `default_value` is set, a missing (or null) field yields it.
absl::StatusOr<int64_t> GetInt(const nlohmann::json& obj, absl::string_view key,
                               std::optional<int64_t> default_value = {});
absl::StatusOr<double> GetDouble(const nlohmann::json& obj,
                                 absl::string_view key,
                                 std::optional<double> default_value = {});
absl::StatusOr<bool> GetBool(const nlohmann::json& obj, absl::string_view key,
                             std::optional<bool> default_value = {});
absl::StatusOr<std::string> GetString(
    const nlohmann::json& obj, absl::string_view key,
    std::optional<std::string> default_value = {});

// Converts an integer JSON value (signed or unsigned) to int64_t; nullopt for
// non-integers and for unsigned values above INT64_MAX.
std::optional<int64_t> AsInt64(const nlohmann::json& value);

// True when `obj` has `key` with a non-null value.
bool HasNonNull(const nlohmann::json& obj, absl::string_view key);

// The whole of the (small) file at `path`, for the JSON files of a model
// directory. Errors name the path: NotFound "cannot open", DataLoss "read
// error", InvalidArgument "not a regular file" (see OpenRegularFile).
absl::StatusOr<std::string> ReadFileText(const std::string& path);

// A read-only descriptor (O_CLOEXEC, blocking reads) of the regular file at
// `path` (symbolic links followed); the caller closes it. Anything else is
// refused at once, naming the path: a FIFO, a socket or a device
// (InvalidArgument "PATH: not a regular file (a FIFO)"), which would
// otherwise block the loader until a writer appears (issue 29), or read
// forever. NotFound / PermissionDenied when it cannot be opened.
absl::StatusOr<int> OpenRegularFile(const std::string& path);

// What a stat mode is, for messages: "a FIFO", "a directory", ...
const char* FileKind(unsigned int st_mode);

// True when something exists at `path` (stat succeeds).
bool FileExists(const std::string& path);

}  // namespace moeserve::engine::json_util

#endif  // MOESERVE_ENGINE_JSON_UTIL_H_
