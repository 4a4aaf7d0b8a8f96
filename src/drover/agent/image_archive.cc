#include "drover/agent/image_archive.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "drover/agent/image_store.h"
#include "drover/auth/token.h"
#include "drover/common/files.h"
#include "drover/common/image_ref.h"
#include "drover/common/json_depth.h"

namespace drover::agent {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxEntries = 1'000'000;
constexpr int64_t kMaxListBytes = 1 << 20;  // manifest.json, index.json
constexpr int64_t kMaxLongName = 4096;
constexpr int64_t kMaxPax = 64 << 10;

struct Entry {
  char type = '0';
  int64_t offset = 0;  // of its data
  int64_t size = 0;
};

Status ReadAt(int fd, int64_t at, size_t n, std::string* out) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out->data() + got, n - got, at + static_cast<int64_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return InvalidArgument("the archive is shorter than its headers say");
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// A tar number field: octal digits (NUL or space ended), or base-256 when
// its first byte's high bit is set (GNU, for sizes of 8 GiB and more).
Result<int64_t> Number(const unsigned char* f, size_t n) {
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return InvalidArgument("a tar header holds a negative or huge number");
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return InvalidArgument("a tar header holds a number too large");
      v = (v << 8) | f[i];
    }
    return static_cast<int64_t>(v);
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') ++i;
  int64_t v = 0;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return InvalidArgument("a tar header holds a number too large");
    v = v * 8 + (f[i] - '0');
  }
  if (i < n && f[i] != 0 && f[i] != ' ') return InvalidArgument("a tar header holds a malformed number");
  return v;
}

std::string Field(const unsigned char* f, size_t n) {
  size_t len = 0;
  while (len < n && f[len] != 0) ++len;
  return std::string(reinterpret_cast<const char*>(f), len);
}

std::string Clean(std::string name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  while (!name.empty() && name.back() == '/') name.pop_back();
  return name;
}

// The path a pax extended header sets, or "".
std::string PaxPath(const std::string& records) {
  std::string path;
  for (size_t at = 0; at < records.size();) {
    size_t space = records.find(' ', at);
    if (space == std::string::npos) break;
    size_t len = 0;
    for (size_t i = at; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9' || len > records.size()) return path;
      len = len * 10 + static_cast<size_t>(records[i] - '0');
    }
    if (len == 0 || at + len > records.size()) break;
    std::string kv = records.substr(space + 1, at + len - space - 2);  // without the newline
    if (kv.rfind("path=", 0) == 0) path = kv.substr(5);
    at += len;
  }
  return path;
}

// Every entry's name -> where its data is, as the headers say.
Result<std::map<std::string, Entry>> ListTar(int fd, int64_t file_size) {
  std::map<std::string, Entry> entries;
  std::string header, data, long_name, pax_path;
  size_t count = 0;
  for (int64_t at = 0; at + 512 <= file_size;) {
    DROVER_RETURN_IF_ERROR(ReadAt(fd, at, 512, &header));
    const auto* h = reinterpret_cast<const unsigned char*>(header.data());
    if (std::all_of(h, h + 512, [](unsigned char c) { return c == 0; })) break;  // the end
    int64_t sum = 0;
    for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    auto said = Number(h + 148, 8);
    if (!said.ok() || *said != sum) {
      return InvalidArgument(at == 0 ? "the archive is not a tar file"
                                     : fmt::format("the tar header at byte {} is damaged (its checksum is wrong)", at));
    }
    DROVER_ASSIGN_OR_RETURN(int64_t size, Number(h + 124, 12));
    const int64_t data_at = at + 512;
    if (size > file_size - data_at) {
      return InvalidArgument(fmt::format("a tar entry at byte {} runs past the end of the archive", at));
    }
    const char type = static_cast<char>(h[156]);
    std::string name = Field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0) {
      std::string prefix = Field(h + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (type == 'L' || type == 'x') {
      if (size > (type == 'L' ? kMaxLongName : kMaxPax)) {
        return InvalidArgument(fmt::format("a tar entry's name record at byte {} is too large", at));
      }
      DROVER_RETURN_IF_ERROR(ReadAt(fd, data_at, static_cast<size_t>(size), &data));
      if (type == 'L') long_name = Field(reinterpret_cast<const unsigned char*>(data.data()), data.size());
      if (type == 'x') pax_path = PaxPath(data);
    } else if (type != 'g') {
      if (!pax_path.empty()) name = pax_path;
      if (!long_name.empty()) name = long_name;
      long_name.clear();
      pax_path.clear();
      if (++count > kMaxEntries) return InvalidArgument(fmt::format("the archive has more than {} entries", kMaxEntries));
      entries[Clean(name)] = Entry{type, data_at, size};
    }
    at = data_at + (size + 511) / 512 * 512;
  }
  return entries;
}

const char* Compression(const std::string& magic) {
  auto starts = [&](std::string_view m) { return magic.compare(0, m.size(), m) == 0; };
  if (starts("\x1f\x8b")) return "gzip";
  if (starts("\x28\xb5\x2f\xfd")) return "zstd";
  if (starts(std::string_view("\xfd\x37\x7a\x58\x5a\x00", 6))) return "xz";
  if (starts("BZh")) return "bzip2";
  return nullptr;
}

Result<json> ReadList(int fd, const std::map<std::string, Entry>& entries, const std::string& name) {
  const Entry& e = entries.at(name);
  if (e.type != '0' && e.type != '\0') return InvalidArgument(fmt::format("the archive's {} is not a file", name));
  if (e.size > kMaxListBytes) return InvalidArgument(fmt::format("the archive's {} is larger than 1 MiB", name));
  std::string text;
  DROVER_RETURN_IF_ERROR(ReadAt(fd, e.offset, static_cast<size_t>(e.size), &text));
  DROVER_RETURN_IF_ERROR(CheckJsonDepth(text, 16));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("the archive's {} is not JSON", name));
  return j;
}

void AddName(const std::string& text, std::vector<std::string>* names) {
  auto ref = ParseImageRef(text);
  if (!ref.ok() || !ref->digest.empty()) return;
  std::string s = ref->String();
  if (std::find(names->begin(), names->end(), s) == names->end()) names->push_back(std::move(s));
}

Result<ArchiveContents> DockerArchive(int fd, const std::map<std::string, Entry>& entries) {
  DROVER_ASSIGN_OR_RETURN(json list, ReadList(fd, entries, "manifest.json"));
  if (!list.is_array()) return InvalidArgument("the archive's manifest.json is not a list");
  ArchiveContents out;
  out.format = "docker-archive";
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    if (!item.is_object()) return InvalidArgument("the archive's manifest.json lists something that is not an image");
    ArchiveImage im;
    if (item.contains("RepoTags") && item["RepoTags"].is_array()) {
      for (const json& t : item["RepoTags"]) {
        if (t.is_string()) AddName(t.get<std::string>(), &im.names);
      }
    }
    if (list.size() > 1) im.source_name = fmt::format("@{}", i);
    out.images.push_back(std::move(im));
  }
  return out;
}

Result<ArchiveContents> OciArchive(int fd, const std::map<std::string, Entry>& entries) {
  DROVER_ASSIGN_OR_RETURN(json index, ReadList(fd, entries, "index.json"));
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array()) {
    return InvalidArgument("the archive's index.json lists no manifests");
  }
  const json& manifests = index["manifests"];
  ArchiveContents out;
  out.format = "oci-archive";
  for (const json& m : manifests) {
    if (!m.is_object() || !m.contains("digest") || !m["digest"].is_string()) {
      return InvalidArgument("the archive's index.json lists a manifest without a digest");
    }
    ArchiveImage im;
    im.manifest_digest = m["digest"];
    if (!ValidImageDigest(im.manifest_digest)) {
      return InvalidArgument(fmt::format("the archive's index.json names '{}', not a sha256 digest",
                                         im.manifest_digest.substr(0, 80)));
    }
    const std::string blob = "blobs/sha256/" + im.manifest_digest.substr(7);
    auto e = entries.find(blob);
    if (e == entries.end() || (e->second.type != '0' && e->second.type != '\0')) {
      return InvalidArgument(fmt::format("the archive has no manifest {}", im.manifest_digest));
    }
    if (e->second.size > static_cast<int64_t>(kMaxManifestBytes)) {
      return InvalidArgument(fmt::format("the archive's manifest {} is larger than 4 MiB", im.manifest_digest));
    }
    DROVER_RETURN_IF_ERROR(ReadAt(fd, e->second.offset, static_cast<size_t>(e->second.size), &im.manifest));
    if ("sha256:" + auth::Sha256Hex(im.manifest) != im.manifest_digest) {
      return InvalidArgument(fmt::format("the archive's manifest {} does not match its digest", im.manifest_digest));
    }
    std::string ref_name;
    if (m.contains("annotations") && m["annotations"].is_object()) {
      ref_name = m["annotations"].value("org.opencontainers.image.ref.name", "");
    }
    // A bare tag ("latest", as skopeo's oci: layouts write it) names no image.
    if (ref_name.find_first_of("/:") != std::string::npos) AddName(ref_name, &im.names);
    if (manifests.size() > 1) im.source_name = ref_name;
    out.images.push_back(std::move(im));
  }
  return out;
}

}  // namespace

Result<ArchiveContents> ReadImageArchive(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return Unavailable(fmt::format("cannot open the archive '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return InvalidArgument("the archive is not a file");
  std::string magic;
  if (st.st_size >= 6 && ReadAt(fd.get(), 0, 6, &magic).ok()) {
    if (const char* c = Compression(magic)) {
      return InvalidArgument(fmt::format(
          "the archive is compressed ({}); decompress it first (`drover images load` decompresses gzip itself)", c));
    }
  }
  if (st.st_size < 512) return InvalidArgument("the archive is not a tar file (it is shorter than one header)");
  DROVER_ASSIGN_OR_RETURN(auto entries, ListTar(fd.get(), st.st_size));
  Result<ArchiveContents> out = InvalidArgument(
      "the archive holds no image: it is neither a docker-archive (manifest.json, as `docker save` writes) nor an "
      "oci-archive (oci-layout and index.json)");
  if (entries.contains("manifest.json")) {
    out = DockerArchive(fd.get(), entries);
  } else if (entries.contains("oci-layout") && entries.contains("index.json")) {
    out = OciArchive(fd.get(), entries);
  }
  if (out.ok() && out->images.empty()) return InvalidArgument("the archive lists no image");
  return out;
}

}  // namespace drover::agent
