// The image store's readers of untrusted image files (image_store.h): an
// image's config, its manifest, its own account files. Pure: bytes in, values
// or a reason out.
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>

#include "drover/agent/image_store.h"
#include "drover/common/files.h"
#include "drover/common/json_depth.h"

namespace drover::agent {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 32;
constexpr size_t kMaxStrings = 4096;  // entries of an env, cmd, entrypoint

Result<std::vector<std::string>> Strings(const json& j, const char* what) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return InvalidArgument(fmt::format("image config: {} is not a list", what));
  if (j.size() > kMaxStrings) return InvalidArgument(fmt::format("image config: {} has {} entries", what, j.size()));
  for (const json& e : j) {
    if (!e.is_string()) return InvalidArgument(fmt::format("image config: {} holds a non-string", what));
    out.push_back(e.get<std::string>());
  }
  return out;
}

// One of the image's own account files (/etc/passwd, /etc/group) as the
// overlay of `layers` (the top one first) shows it: from the topmost layer
// that has the entry, unless a layer above deleted it (a whiteout) or hid
// the layers below (an opaque /etc); a whiteout is a character device, so
// it reads as no file as any other non-file does. Never through a link (which could name
// the node's own): a link, at /etc or at the file, reads as no file.
std::string AccountFile(const std::vector<std::string>& layers, const char* name) {
  for (const std::string& layer : layers) {
    const std::string etc = layer + "/etc";
    struct stat st {};
    if (::lstat(etc.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return "";
    }
    if (!S_ISDIR(st.st_mode)) return "";  // a whiteout, a file or a link
    const std::string path = etc + "/" + name;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISREG(st.st_mode)) return "";
      auto text = ReadTextFile(path, 4 << 20);
      return text.ok() ? *text : "";
    }
    if (errno != ENOENT) return "";
    char opaque[2] = {};
    if (::lgetxattr(etc.c_str(), "trusted.overlay.opaque", opaque, sizeof opaque) == 1 && opaque[0] == 'y') return "";
  }
  return "";
}

// The numeric id of `name` in an account file's lines ("name:x:ID:GID:..."):
// field 2 (uid or gid), and for passwd also field 3 (the primary group).
std::optional<std::pair<uint32_t, uint32_t>> LookUp(const std::string& text, const std::string& name) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    std::vector<std::string> f;
    for (size_t p = 0, q; p <= line.size(); p = q + 1) {
      q = line.find(':', p);
      if (q == std::string::npos) q = line.size();
      f.push_back(line.substr(p, q - p));
    }
    if (f.size() < 3 || f[0] != name) continue;
    auto num = [](const std::string& s) -> std::optional<uint32_t> {
      uint32_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
      return v;
    };
    auto id = num(f[2]);
    if (!id) return std::nullopt;
    auto second = f.size() > 3 ? num(f[3]) : std::nullopt;
    return std::make_pair(*id, second.value_or(*id));
  }
  return std::nullopt;
}

// The primary group of the line whose uid is `uid`.
std::optional<uint32_t> LookUpUid(const std::string& text, uint32_t uid) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    const size_t c = b == std::string::npos ? b : line.find(':', b + 1);
    if (c == std::string::npos) continue;
    auto name = line.substr(0, a);
    auto found = LookUp(line, name);
    if (found && found->first == uid) return found->second;
  }
  return std::nullopt;
}

}  // namespace

bool ValidImageDigest(const std::string& d) {
  if (d.size() != 71 || d.compare(0, 7, "sha256:") != 0) return false;
  return std::all_of(d.begin() + 7, d.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<std::pair<uint32_t, uint32_t>> ResolveImageUser(const std::vector<std::string>& layers,
                                                       const std::string& user) {
  if (user.empty()) return std::make_pair(0u, 0u);
  const size_t colon = user.find(':');
  const std::string u = user.substr(0, colon);
  const std::string g = colon == std::string::npos ? "" : user.substr(colon + 1);
  auto numeric = [](const std::string& s) -> std::optional<uint32_t> {
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  };
  uint32_t uid = 0, gid = 0;
  if (auto n = numeric(u)) {
    // A uid: its primary group where passwd lists it, else 0 (docker's rule).
    uid = *n;
    if (auto pw = LookUpUid(AccountFile(layers, "passwd"), *n)) gid = *pw;
  } else {
    auto pw = LookUp(AccountFile(layers, "passwd"), u);
    if (!pw) return InvalidArgument(fmt::format("the image's user '{}' is not in its /etc/passwd", u));
    uid = pw->first;
    gid = pw->second;
  }
  if (!g.empty()) {
    if (auto n = numeric(g)) {
      gid = *n;
    } else {
      auto gr = LookUp(AccountFile(layers, "group"), g);
      if (!gr) return InvalidArgument(fmt::format("the image's group '{}' is not in its /etc/group", g));
      gid = gr->first;
    }
  }
  return std::make_pair(uid, gid);
}

Result<ImageConfig> ParseImageConfig(std::string_view text) {
  if (text.size() > kMaxImageConfigBytes) return InvalidArgument(fmt::format("image config is {} bytes", text.size()));
  DROVER_RETURN_IF_ERROR(CheckJsonDepth(text, kMaxJsonDepth));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("image config is not a JSON object");
  if (j.contains("os") && j["os"] != "linux") return InvalidArgument("image is not for linux");
  ImageConfig c;
  const json& cfg = j.contains("config") ? j["config"] : json(nullptr);
  if (cfg.is_null()) return c;
  if (!cfg.is_object()) return InvalidArgument("image config: config is not an object");
  DROVER_ASSIGN_OR_RETURN(c.entrypoint, Strings(cfg.value("Entrypoint", json(nullptr)), "Entrypoint"));
  DROVER_ASSIGN_OR_RETURN(c.cmd, Strings(cfg.value("Cmd", json(nullptr)), "Cmd"));
  DROVER_ASSIGN_OR_RETURN(c.env, Strings(cfg.value("Env", json(nullptr)), "Env"));
  if (cfg.contains("WorkingDir") && cfg["WorkingDir"].is_string()) c.working_dir = cfg["WorkingDir"];
  if (cfg.contains("User") && cfg["User"].is_string()) c.user = cfg["User"];
  if (c.working_dir.size() > 4096 || c.user.size() > 256) return InvalidArgument("image config: a field is too long");
  return c;
}

Result<ManifestInfo> ParseManifest(std::string_view text, size_t max_layers) {
  if (text.size() > kMaxManifestBytes) return InvalidArgument(fmt::format("manifest is {} bytes", text.size()));
  DROVER_RETURN_IF_ERROR(CheckJsonDepth(text, kMaxJsonDepth));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("manifest is not a JSON object");
  ManifestInfo m;
  if (j.contains("manifests")) {
    m.is_index = true;
    if (!j["manifests"].is_array()) return InvalidArgument("manifest list: manifests is not a list");
    for (const json& e : j["manifests"]) {
      if (!e.is_object() || !e.contains("platform") || !e["platform"].is_object()) continue;
      const json& p = e["platform"];
      if (p.value("os", "") == "linux" && p.value("architecture", "") == "amd64" && e.contains("digest") &&
          e["digest"].is_string()) {
        std::string d = e["digest"];
        if (!ValidImageDigest(d)) return InvalidArgument("manifest list: a malformed digest for linux/amd64");
        m.platform_digest = d;
        break;
      }
    }
    if (m.platform_digest.empty()) return InvalidArgument("the image has no linux/amd64 manifest");
    return m;
  }
  if (j.value("schemaVersion", 0) != 2) return InvalidArgument("manifest: not schema version 2");
  if (!j.contains("layers") || !j["layers"].is_array()) return InvalidArgument("manifest: layers is not a list");
  if (j["layers"].size() > max_layers) {
    return InvalidArgument(
        fmt::format("the image has {} layers, more than the {} allowed", j["layers"].size(), max_layers));
  }
  for (const json& l : j["layers"]) {
    if (!l.is_object() || !l.contains("size") || !l["size"].is_number_integer() || l["size"].get<int64_t>() < 0 ||
        !l.contains("digest") || !l["digest"].is_string()) {
      return InvalidArgument("manifest: a layer without a size or digest");
    }
    m.layer_sizes.push_back(l["size"].get<int64_t>());
  }
  if (!j.contains("config") || !j["config"].is_object() || !j["config"].contains("size") ||
      !j["config"]["size"].is_number_integer()) {
    return InvalidArgument("manifest: no config");
  }
  m.config_size = j["config"]["size"].get<int64_t>();
  m.config_digest = j["config"].value("digest", "");
  if (!ValidImageDigest(m.config_digest)) return InvalidArgument("manifest: the config has no sha256 digest");
  if (m.config_size < 0 || m.config_size > static_cast<int64_t>(kMaxImageConfigBytes)) {
    return InvalidArgument(fmt::format("manifest: the config is {} bytes", m.config_size));
  }
  return m;
}

}  // namespace drover::agent
