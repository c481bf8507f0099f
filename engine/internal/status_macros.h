#ifndef MOESERVE_ENGINE_INTERNAL_STATUS_MACROS_H_
#define MOESERVE_ENGINE_INTERNAL_STATUS_MACROS_H_

// Early-return helpers for absl::Status / absl::StatusOr inside engine/.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ENGINE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status engine_status_ = (expr);          \
    if (!engine_status_.ok()) return engine_status_; \
  } while (0)

#define ENGINE_CONCAT_INNER_(a, b) a##b
#define ENGINE_CONCAT_(a, b) ENGINE_CONCAT_INNER_(a, b)

// `lhs` = value of StatusOr `expr`, or return its status.
#define ENGINE_ASSIGN_OR_RETURN(lhs, expr) \
  ENGINE_ASSIGN_OR_RETURN_IMPL_(ENGINE_CONCAT_(engine_or_, __LINE__), lhs, expr)

#define ENGINE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // MOESERVE_ENGINE_INTERNAL_STATUS_MACROS_H_
