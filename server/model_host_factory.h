// Builds the ModelHost for a server configuration.
#ifndef MOESERVE_SERVER_MODEL_HOST_FACTORY_H_
#define MOESERVE_SERVER_MODEL_HOST_FACTORY_H_

#include <memory>

#include "metrics/registry.h"
#include "server/async_model_host.h"
#include "server/server_options.h"

namespace moeserve::server {

// Starts loading options.model_dir in the background. Never fails: until the
// model is ready (or if it cannot be loaded) the host answers UNAVAILABLE
// with the reason and the server stays NOT_SERVING.
// Engine metrics go to `registry` (must outlive the host).
std::unique_ptr<AsyncModelHost> CreateModelHost(const ServerOptions& options,
                                                metrics::Registry* registry);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_MODEL_HOST_FACTORY_H_
