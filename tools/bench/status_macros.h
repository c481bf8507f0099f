// Early-return helpers for absl::Status / absl::StatusOr inside tools/bench
// (engine/'s are private to engine/).
#ifndef MOESERVE_TOOLS_BENCH_STATUS_MACROS_H_
#define MOESERVE_TOOLS_BENCH_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define BENCH_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status bench_status_ = (expr);         \
    if (!bench_status_.ok()) return bench_status_; \
  } while (0)

#define BENCH_CONCAT_INNER_(a, b) a##b
#define BENCH_CONCAT_(a, b) BENCH_CONCAT_INNER_(a, b)

// `lhs` = value of StatusOr `expr`, or return its status.
#define BENCH_ASSIGN_OR_RETURN(lhs, expr) \
  BENCH_ASSIGN_OR_RETURN_IMPL_(BENCH_CONCAT_(bench_or_, __LINE__), lhs, expr)

#define BENCH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // MOESERVE_TOOLS_BENCH_STATUS_MACROS_H_
