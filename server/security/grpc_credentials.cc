#include "server/security/grpc_credentials.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "grpcpp/security/auth_context.h"

namespace moeserve::server::security {
namespace {

absl::string_view View(const grpc_slice& slice) {
  return absl::string_view(
      reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
      GRPC_SLICE_LENGTH(slice));
}

// The value of the first `name` property of `context`, if any.
std::optional<std::string> FindProperty(const grpc_auth_context* context,
                                        const char* name) {
  grpc_auth_property_iterator it =
      grpc_auth_context_find_properties_by_name(context, name);
  const grpc_auth_property* property = grpc_auth_property_iterator_next(&it);
  if (property == nullptr) return std::nullopt;
  return std::string(property->value, property->value_length);
}

// The auth metadata processor and its state; owned by the credentials
// (freed by their `destroy` callback).
//
// gRPC hands the processor the *connection's* AuthContext (the server auth
// filter passes its channel's context, which every call on the connection
// shares), not a per-call one, and calls it concurrently for the calls of
// one connection. So nothing per call is written there: each call's token
// is checked here and left in the call's metadata, where CallIdentity()
// finds it; the context only gets, once per connection and under mu_,
// properties every call of the connection shares (kTokenAuthProperty, or
// the mTLS identity). Handlers read them only after their own call passed
// here, i.e. after that single write.
class Processor {
 public:
  explicit Processor(std::shared_ptr<const BearerTokens> tokens)
      : tokens_(std::move(tokens)) {}

  static void Process(void* state, grpc_auth_context* context,
                      const grpc_metadata* md, size_t num_md,
                      grpc_process_auth_metadata_done_cb done,
                      void* user_data) {
    static_cast<Processor*>(state)->Check(context, md, num_md, done, user_data);
  }
  static void Destroy(void* state) { delete static_cast<Processor*>(state); }

 private:
  // Called once per call, on a gRPC thread, before the handler: must not
  // block. Calls `done` exactly once.
  void Check(grpc_auth_context* context, const grpc_metadata* md, size_t num_md,
             grpc_process_auth_metadata_done_cb done, void* user_data) {
    const grpc_metadata* authorization = nullptr;
    int authorizations = 0;
    absl::string_view path;
    for (size_t i = 0; i < num_md; ++i) {
      const absl::string_view key = View(md[i].key);
      if (key == ":path") path = View(md[i].value);
      if (key == "authorization") {
        authorization = &md[i];
        ++authorizations;
      }
    }
    // A call without :path cannot be told open: it is checked.
    if (!path.empty() && IsOpenMethod(path)) {
      done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
      return;
    }
    if (tokens_ != nullptr) {
      // One header, so that CallIdentity() reads the one checked here.
      if (authorizations != 1 ||
          !tokens_->IdentifyAuthorization(View(authorization->value))
               .has_value()) {
        done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
             "missing or invalid bearer token (metadata 'authorization: "
             "Bearer <token>', once)");
        return;
      }
      SetConnectionProperty(context, kTokenAuthProperty, "bearer");
    } else if (std::optional<std::string> subject =
                   FindProperty(context, GRPC_X509_SUBJECT_PROPERTY_NAME)) {
      // The certificate is the connection's: so is this identity.
      SetConnectionProperty(context, kIdentityProperty,
                            absl::StrCat("x509:", *subject));
    }
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  }

  // Sets `name` on the connection's context unless it has it already.
  void SetConnectionProperty(grpc_auth_context* context, const char* name,
                             const std::string& value) {
    base::MutexLock lock(&mu_);
    if (FindProperty(context, name).has_value()) return;
    grpc_auth_context_add_cstring_property(context, name, value.c_str());
  }

  const std::shared_ptr<const BearerTokens> tokens_;  // null: mTLS only
  // Serialises the property writes of all connections (each is one short
  // lookup, once per call).
  base::Mutex mu_;
};

grpc_server_credentials* CoreTlsCredentials(const SecurityOptions& options) {
  grpc_ssl_pem_key_cert_pair pair = {options.tls_key_pem.c_str(),
                                     options.tls_cert_pem.c_str()};
  // Copies the PEM strings.
  return grpc_ssl_server_credentials_create_ex(
      options.mtls() ? options.tls_client_ca_pem.c_str() : nullptr, &pair, 1,
      options.mtls()
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
      nullptr);
}

// ServerCredentials over core credentials (TLS or plaintext) carrying the
// C processor above: the C++ InsecureServerCredentials refuse a processor,
// and the C++ wrapper of one runs it on an extra thread.
class ProcessorCredentials final : public grpc::ServerCredentials {
 public:
  // The base class has initialised gRPC when the body runs.
  explicit ProcessorCredentials(const SecurityOptions& options)
      : creds_(options.tls() ? CoreTlsCredentials(options)
                             : grpc_insecure_server_credentials_create()) {
    grpc_auth_metadata_processor processor = {&Processor::Process,
                                              &Processor::Destroy,
                                              new Processor{options.tokens}};
    grpc_server_credentials_set_auth_metadata_processor(creds_, processor);
  }
  ~ProcessorCredentials() override { grpc_server_credentials_release(creds_); }

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    // Not offered: the constructor installs the processor.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

}  // namespace

bool IsOpenMethod(absl::string_view path) {
  return absl::StartsWith(path, "/grpc.health.v1.Health/") ||
         absl::StartsWith(path, "/grpc.reflection.v1alpha.ServerReflection/") ||
         absl::StartsWith(path, "/grpc.reflection.v1.ServerReflection/");
}

std::optional<std::string> CallIdentity(
    const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return std::nullopt;
  if (!auth->FindPropertyValues(kTokenAuthProperty).empty()) {
    // The processor accepted this call's one authorization header.
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find("authorization");
    if (it == metadata.end()) return std::nullopt;  // an open method
    const std::optional<absl::string_view> token =
        BearerTokens::TokenOfAuthorization(
            absl::string_view(it->second.data(), it->second.size()));
    if (!token.has_value()) return std::nullopt;
    return BearerTokens::IdentityOfToken(*token);
  }
  const std::vector<grpc::string_ref> ids =
      auth->FindPropertyValues(kIdentityProperty);
  if (ids.empty()) return std::nullopt;
  return std::string(ids.front().data(), ids.front().size());
}

std::shared_ptr<grpc::ServerCredentials> MakeGrpcServerCredentials(
    const SecurityOptions& options) {
  if (options.tokens == nullptr && !options.mtls()) {
    if (!options.tls()) return grpc::InsecureServerCredentials();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(
        {options.tls_key_pem, options.tls_cert_pem});
    return grpc::SslServerCredentials(ssl);
  }
  return std::make_shared<ProcessorCredentials>(options);
}

}  // namespace moeserve::server::security
