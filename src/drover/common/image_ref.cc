#include "drover/common/image_ref.h"

#include <fmt/format.h>

#include <vector>

namespace drover {
namespace {

constexpr std::string_view kDockerHub = "docker.io";
constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxTagLength = 128;

bool Lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool Alnum(char c) { return Lower(c) || (c >= 'A' && c <= 'Z'); }
bool Hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// One component of a repository path: lower-case alphanumeric runs joined
// by ".", "_", "__" or a run of "-".
bool PathComponent(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;
    while (i < s.size() && Lower(s[i])) ++i;
    if (i == run) return false;  // a separator first, or two in a row
    if (i == s.size()) return true;
    size_t sep = i;
    while (i < s.size() && !Lower(s[i])) ++i;
    std::string_view between = s.substr(sep, i - sep);
    bool dashes = between.find_first_not_of('-') == std::string_view::npos;
    if (!(between == "." || between == "_" || between == "__" || dashes)) return false;
    if (i == s.size()) return false;  // ends with a separator
  }
  return false;  // empty
}

// A DNS label of a registry's host name.
bool HostLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !Alnum(s.front()) || !Alnum(s.back())) return false;
  for (char c : s) {
    if (!Alnum(c) && c != '-') return false;
  }
  return true;
}

// host[:port], host "[IPv6]" or DNS labels.
bool Domain(std::string_view s) {
  std::string_view host = s;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : s.substr(1, close - 1)) {
      if (!Hex(c) && !(c >= 'A' && c <= 'F') && c != ':') return false;
    }
    host = s.substr(0, close + 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
  } else {
    size_t colon = s.find(':');
    if (colon != std::string_view::npos) {
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
      if (port.empty()) return false;
    }
    for (size_t start = 0;;) {
      size_t dot = host.find('.', start);
      if (!HostLabel(host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start))) {
        return false;
      }
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
  }
  if (port.empty()) return true;
  if (port.size() > 5) return false;
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return value >= 1 && value <= 65535;
}

bool Tag(std::string_view s) {
  if (s.empty() || s.size() > kMaxTagLength) return false;
  auto word = [](char c) { return Alnum(c) || c == '_'; };
  if (!word(s.front())) return false;
  for (char c : s) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

Status CheckDigest(std::string_view d) {
  size_t colon = d.find(':');
  std::string_view algorithm = d.substr(0, colon);
  std::string_view hex = colon == std::string_view::npos ? std::string_view() : d.substr(colon + 1);
  size_t want = algorithm == "sha256" ? 64 : algorithm == "sha512" ? 128 : 0;
  if (want == 0) return InvalidArgument("the digest must be sha256:<64 hex digits> or sha512:<128 hex digits>");
  if (hex.size() != want) {
    return InvalidArgument(fmt::format("a {} digest has {} hex digits, not {}", algorithm, want, hex.size()));
  }
  for (char c : hex) {
    if (!Hex(c)) return InvalidArgument("the digest's hex digits must be 0-9 and lower-case a-f");
  }
  return Status::Ok();
}

}  // namespace

std::string ImageRef::Name() const { return registry + "/" + repository; }

std::string ImageRef::String() const {
  std::string out = Name();
  if (!tag.empty()) out += ":" + tag;
  if (!digest.empty()) out += "@" + digest;
  return out;
}

Result<ImageRef> ParseImageRef(std::string_view text) {
  if (text.empty()) return InvalidArgument("image reference is empty");
  if (text.size() > kMaxImageRefLength) {
    return InvalidArgument(
        fmt::format("image reference is {} characters long, more than {}", text.size(), kMaxImageRefLength));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c <= ' ' || c >= 0x7f) {
      return InvalidArgument(fmt::format("image reference has a space, control or non-ASCII character at byte {}", i));
    }
  }
  auto bad = [&](std::string_view why) { return InvalidArgument(fmt::format("image '{}': {}", text, why)); };
  ImageRef ref;
  std::string_view rest = text;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    std::string_view digest = rest.substr(at + 1);
    if (Status s = CheckDigest(digest); !s.ok()) return bad(s.message());
    ref.digest = std::string(digest);
    rest = rest.substr(0, at);
  }
  // A tag is after the last ':' that follows the last '/' (a ':' before it
  // is the registry's port).
  const size_t slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    std::string_view tag = rest.substr(colon + 1);
    if (!Tag(tag)) {
      return bad(
          fmt::format("tag '{}' is not valid: up to {} letters, digits, '_', '.' and '-', not starting with '.' or '-'",
                      tag, kMaxTagLength));
    }
    ref.tag = std::string(tag);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no repository name");
  if (rest.size() > kMaxNameLength) {
    return bad(fmt::format("the name is {} characters long, more than {}", rest.size(), kMaxNameLength));
  }
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t next = rest.find('/', start);
    parts.push_back(rest.substr(start, next == std::string_view::npos ? std::string_view::npos : next - start));
    if (next == std::string_view::npos) break;
    start = next + 1;
  }
  // Docker's rule: the first of several components is a registry when it
  // has a '.' or a ':', is "localhost", or is not all lower case.
  const std::string_view first = parts.front();
  const bool has_domain =
      parts.size() > 1 && (first.find_first_of(".:[") != std::string_view::npos || first == "localhost" ||
                           first.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string_view::npos);
  size_t path_start = 0;
  if (has_domain) {
    if (!Domain(first)) return bad(fmt::format("registry '{}' is not a host name, IPv6 address or host:port", first));
    ref.registry = std::string(first == "index.docker.io" ? kDockerHub : first);
    path_start = 1;
  } else {
    ref.registry = std::string(kDockerHub);
  }
  for (size_t i = path_start; i < parts.size(); ++i) {
    if (parts[i].empty()) return bad("an empty path component (a '/' too many)");
    if (!PathComponent(parts[i])) {
      return bad(fmt::format(
          "repository component '{}' is not valid: lower-case letters and digits, joined by '.', '_', '__' or "
          "dashes",
          parts[i]));
    }
    if (!ref.repository.empty()) ref.repository += "/";
    ref.repository += parts[i];
  }
  if (ref.registry == kDockerHub && ref.repository.find('/') == std::string::npos) {
    ref.repository = "library/" + ref.repository;
  }
  // The limit holds for the normal form too, so that it parses again.
  if (const size_t n = ref.Name().size(); n > kMaxNameLength) {
    return bad(fmt::format("the name is {} characters long as {}, more than {}", n, ref.Name().substr(0, 32) + "...",
                           kMaxNameLength));
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

}  // namespace drover
