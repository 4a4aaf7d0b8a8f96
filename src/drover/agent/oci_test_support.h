#pragma once
// A real registry and real images for the container tests: Debian's
// docker-registry on loopback, images built by umoci from a busybox-static
// root file system the test makes, pushed with skopeo. Nothing is fetched
// from outside the machine.

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "drover/agent/agent_test_support.h"

namespace drover::agent::test_support {

// Runs `cmd` with sh -c; its exit status (0: success).
inline int Sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// A free TCP port on loopback (bound and released: the registry takes it next).
inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A Python proxy in front of the registry at `upstream` (host:port), for the
// tests that play a misbehaving one: `servers` (Python) defines the handlers
// and serves; it may call relay(h), which forwards h's request upstream and
// sends back the status and headers, and returns the body, for the handler
// to send (or not). Run with RunPython.
inline std::string RegistryProxyScript(const std::string& upstream, const std::string& servers) {
  return "import base64, http.server, threading, time, urllib.request\n"
         "def relay(h):\n"
         "    req = urllib.request.Request(\"http://" +
         upstream +
         "\" + h.path, method=h.command, headers={\"Accept\": h.headers.get(\"Accept\", \"*/*\")})\n"
         "    try: r = urllib.request.urlopen(req)\n"
         "    except urllib.error.HTTPError as e: r = e\n"
         "    data = r.read()\n"
         "    h.send_response(r.status)\n"
         "    for k, v in r.headers.items():\n"
         "        if k.lower() not in (\"connection\", \"transfer-encoding\"): h.send_header(k, v)\n"
         "    h.end_headers()\n"
         "    return data\n" +
         servers;
}

// Runs `script` with python3 in a child; its pid.
inline pid_t RunPython(const std::string& script) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("python3", "python3", script.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

class TestRegistry {
 public:
  // Starts docker-registry on a free loopback port, its data and log in `dir`.
  bool Start(const std::string& dir) {
    dir_ = dir;
    std::filesystem::create_directories(dir + "/data");
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      Spit(dir + "/config.yml", fmt::format("version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n"
                                            "storage:\n  filesystem:\n    rootdirectory: {}/data\n"
                                            "  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{}\n",
                                            dir, port_));
      pid_t pid = ::fork();
      if (pid == 0) {
        std::string log = dir + "/registry.log";
        int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::execlp("docker-registry", "docker-registry", "serve", (dir + "/config.yml").c_str(), nullptr);
        ::_exit(127);
      }
      bool up = PollUntil([&] {
        return Sh(fmt::format("curl -sf -o /dev/null http://127.0.0.1:{}/v2/", port_)) == 0 ||
               ::waitpid(pid, nullptr, WNOHANG) == pid;
      });
      if (up && Sh(fmt::format("curl -sf -o /dev/null http://127.0.0.1:{}/v2/", port_)) == 0) {
        pid_ = pid;
      } else {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
    return pid_ > 0;
  }
  ~TestRegistry() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string host() const { return fmt::format("127.0.0.1:{}", port_); }
  std::string log() const { return Slurp(dir_ + "/registry.log"); }

  // How many times the registry served blob `digest` (a GET of its bytes).
  int BlobGets(const std::string& digest) const {
    std::string text = log();
    std::string needle = "\"GET /v2/";
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      size_t end = text.find('"', at + 1);
      std::string req = text.substr(at, end - at);
      if (req.find("/blobs/" + digest) != std::string::npos) ++n;
    }
    return n;
  }

  // Builds an image `name:tag` from busybox-static with `files` (path in
  // the image -> contents) and the given config, pushes it; its layer's
  // digest in `layer` ("sha256:..."). False when a step failed.
  // `extra_layer`: an uncompressed tar added verbatim as a second layer
  // (umoci raw add-layer), for layers no well-behaved tool would write.
  bool Push(const std::string& name, const std::string& tag, const std::map<std::string, std::string>& files,
            const std::vector<std::string>& config_flags, std::string* layer = nullptr,
            const std::string& extra_layer = "") {
    const std::string work = dir_ + "/build-" + name + "-" + tag;
    const std::string layout = work + "/layout";
    const std::string bundle = work + "/bundle";
    std::filesystem::remove_all(work);
    std::filesystem::create_directories(work);
    if (Sh(fmt::format("umoci init --layout {0} && umoci new --image {0}:{1} && umoci unpack --image {0}:{1} {2}",
                       layout, tag, bundle)) != 0) {
      return false;
    }
    const std::string root = bundle + "/rootfs";
    std::filesystem::create_directories(root + "/bin");
    std::filesystem::create_directories(root + "/etc");
    std::filesystem::create_directories(root + "/tmp");
    std::filesystem::permissions(root + "/tmp", std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
    if (Sh(fmt::format("cp /usr/bin/busybox {0}/bin/busybox && for a in sh echo cat sleep id ls env pwd true false "
                       "trap kill wc grep head; do ln -sf busybox {0}/bin/$a; done && "
                       "echo 'root:x:0:0:root:/root:/bin/sh' > {0}/etc/passwd && "
                       "echo 'app:x:1234:1234:app:/tmp:/bin/sh' >> {0}/etc/passwd",
                       root)) != 0) {
      return false;
    }
    for (const auto& [path, contents] : files) {
      std::filesystem::create_directories(std::filesystem::path(root + path).parent_path());
      Spit(root + path, contents);
    }
    if (!extra_layer.empty() &&
        Sh(fmt::format("umoci repack --image {0}:{1} {2} >/dev/null && umoci raw add-layer --image {0}:{1} {3}", layout,
                       tag, bundle, extra_layer)) != 0) {
      return false;
    }
    std::string flags;
    for (const std::string& f : config_flags) flags += " '" + f + "'";
    if (!extra_layer.empty()) {
      if (Sh(fmt::format("umoci config --image {0}:{1}{2}", layout, tag, flags)) != 0) return false;
      return Sh(fmt::format("skopeo copy --quiet --dest-tls-verify=false oci:{}:{} docker://{}/{}:{}", layout, tag,
                            host(), name, tag)) == 0;
    }
    if (Sh(fmt::format("umoci repack --image {0}:{1} {2} >/dev/null && umoci config --image {0}:{1}{3}", layout, tag,
                       bundle, flags)) != 0) {
      return false;
    }
    if (layer != nullptr) {
      // The one layer's digest, read from the layout's manifest.
      std::string out = work + "/layer";
      Sh(fmt::format(
          "python3 -c \"import json,sys; ix=json.load(open('{0}/index.json'));"
          "m=[x for x in ix['manifests'] if x['annotations']['org.opencontainers.image.ref.name']=='{1}'][0];"
          "mf=json.load(open('{0}/blobs/sha256/'+m['digest'][7:]));print(mf['layers'][-1]['digest'])\" > {2}",
          layout, tag, out));
      *layer = Slurp(out);
      while (!layer->empty() && layer->back() == '\n') layer->pop_back();
    }
    return Sh(fmt::format("skopeo copy --quiet --dest-tls-verify=false oci:{}:{} docker://{}/{}:{}", layout, tag,
                          host(), name, tag)) == 0;
  }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace drover::agent::test_support
