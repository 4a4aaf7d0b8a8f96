#include "drover/rpc/channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <vector>

namespace drover::rpc {
namespace {

class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerFactory(std::string token) : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&header_);
  }

 private:
  std::string header_;  // lives as long as the channel, which owns the factory
};

// What every channel's calls go through: the bearer token, when there is one.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> Interceptors(
    const std::string& token) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!token.empty()) factories.push_back(std::make_unique<BearerFactory>(token));
  return factories;
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token,
                                           std::shared_ptr<grpc::ChannelCredentials> creds,
                                           const grpc::ChannelArguments& args) {
  if (!creds) creds = grpc::InsecureChannelCredentials();
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args, Interceptors(token));
}

std::shared_ptr<grpc::Channel> MakeInProcessChannel(grpc::Server* server, const std::string& token) {
  return server->experimental().InProcessChannelWithInterceptors(grpc::ChannelArguments(), Interceptors(token));
}

}  // namespace drover::rpc
