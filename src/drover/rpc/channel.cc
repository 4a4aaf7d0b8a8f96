#include "drover/rpc/channel.h"

#include <arpa/inet.h>
#include <grpcpp/support/client_interceptor.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
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

// "a:7070,b:7070" -> "ipv4:10.0.0.1:7070,10.0.0.2:7070": gRPC's own list of
// addresses (standbys do not listen, so the leader is the one that answers). Names are resolved here, once, to IPv4.
// Returns
// "" when an entry cannot be (the caller then dials the first as it is).
std::string AddressList(const std::string& addresses, std::string* first_host) {
  std::string target = "ipv4:";
  for (size_t begin = 0; begin <= addresses.size();) {
    size_t comma = std::min(addresses.find(',', begin), addresses.size());
    std::string entry = addresses.substr(begin, comma - begin);
    begin = comma + 1;
    if (entry.empty()) continue;
    size_t colon = entry.rfind(':');
    if (colon == std::string::npos) return "";
    std::string host = entry.substr(0, colon);
    if (first_host->empty()) *first_host = host;
    in_addr ip{};
    if (inet_pton(AF_INET, host.c_str(), &ip) != 1) {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
      ip = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
      freeaddrinfo(found);
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &ip, text, sizeof(text));
    target += (target.size() > 5 ? "," : "") + std::string(text) + entry.substr(colon);
  }
  return target;
}

}  // namespace

void HoldCallbackQueue() {
  // Never used, so never dialed; never destroyed (not even at exit).
  static const auto* const anchor =
      new std::shared_ptr<grpc::Channel>(grpc::CreateChannel("127.0.0.1:9", grpc::InsecureChannelCredentials()));
  (void)anchor;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token,
                                           std::shared_ptr<grpc::ChannelCredentials> creds,
                                           const grpc::ChannelArguments& args) {
  HoldCallbackQueue();
  if (!creds) creds = grpc::InsecureChannelCredentials();
  if (address.find(',') != std::string::npos) {
    std::string first_host;
    std::string target = AddressList(address, &first_host);
    if (!target.empty()) {
      grpc::ChannelArguments list_args = args;
      // TLS checks the certificate against the first server's name (every
      // server of a group carries the names of all: docs/ha.md).
      list_args.SetSslTargetNameOverride(first_host);
      // Calls go to the servers that accept connections: standbys do not
      // listen, so that is the leader. Each address is dialed again within
      // a second of failing, so that a new leader is found about as soon as
      // it listens (pick_first would stay on its first choice's back-off).
      list_args.SetLoadBalancingPolicyName("round_robin");
      list_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      list_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      list_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, list_args, Interceptors(token));
    }
    return grpc::experimental::CreateCustomChannelWithInterceptors(address.substr(0, address.find(',')), creds, args,
                                                                   Interceptors(token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args, Interceptors(token));
}

std::shared_ptr<grpc::Channel> MakeInProcessChannel(grpc::Server* server, const std::string& token) {
  HoldCallbackQueue();
  return server->experimental().InProcessChannelWithInterceptors(grpc::ChannelArguments(), Interceptors(token));
}

}  // namespace drover::rpc
