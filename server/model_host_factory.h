// Chooses and builds the ModelHost for a server configuration.
#ifndef MOESERVE_SERVER_MODEL_HOST_FACTORY_H_
#define MOESERVE_SERVER_MODEL_HOST_FACTORY_H_

#include <memory>

#include "server/model_host.h"
#include "server/server_options.h"

namespace moeserve::server {

// Never fails: when the model cannot be served, the host says why through
// CheckReady() (UNAVAILABLE) and the server stays NOT_SERVING.
std::unique_ptr<ModelHost> CreateModelHost(const ServerOptions& options);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_MODEL_HOST_FACTORY_H_
