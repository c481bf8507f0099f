// What a client may see of a server-side error message.
//
// Messages are built for operators: they name files by the path the server
// opened (absolute, under the operator's directories) and, when they come
// from a library, the library's source location ("src/foo.cc(123) [cond]").
// Neither belongs in an answer to a client (issue 16): ForClient keeps the
// message and replaces every absolute path by its last component and drops
// source locations. The server log keeps the full message.
//
// Pure functions; thread-safe.
#ifndef MOESERVE_SERVER_CLIENT_MESSAGE_H_
#define MOESERVE_SERVER_CLIENT_MESSAGE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace moeserve::server {

// `message` with each absolute path ("/srv/models/x/config.json") replaced
// by its last component ("config.json") and each source location of a C or
// C++ file ("src/normalizer.cc(123) ", "foo.cc:45: ", "foo.h:7") removed.
std::string ForClient(absl::string_view message);

// What metrics and other client-visible places call a model directory: its
// last component ("models/demo/" and "/srv/models/demo" -> "demo"); "" for
// "" or "/".
std::string PublicModelName(absl::string_view model_dir);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_CLIENT_MESSAGE_H_
