// Early-return helpers for absl::Status / absl::StatusOr, the one set used
// everywhere in moeserve (engine, kernels, server, tools).
//
//   MOESERVE_RETURN_IF_ERROR(DoThing());
//   MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<Foo> foo, Foo::Create());
//   MOESERVE_ASSIGN_OR_RETURN(auto [a, b], Pair());  // not supported: name it
#ifndef MOESERVE_BASE_STATUS_MACROS_H_
#define MOESERVE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define MOESERVE_RETURN_IF_ERROR(expr)              \
  do {                                              \
    ::absl::Status moeserve_status_macro_ = (expr); \
    if (!moeserve_status_macro_.ok()) {             \
      return moeserve_status_macro_;                \
    }                                               \
  } while (0)

#define MOESERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define MOESERVE_STATUS_CONCAT_(a, b) MOESERVE_STATUS_CONCAT_INNER_(a, b)

// `lhs` = the value of the absl::StatusOr `expr`, or returns its status.
// `lhs` may be a declaration (`auto x`) or an existing lvalue.
#define MOESERVE_ASSIGN_OR_RETURN(lhs, expr) \
  MOESERVE_ASSIGN_OR_RETURN_IMPL_(           \
      MOESERVE_STATUS_CONCAT_(moeserve_status_or_, __LINE__), lhs, expr)

#define MOESERVE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#endif  // MOESERVE_BASE_STATUS_MACROS_H_
