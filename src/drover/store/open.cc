#include "drover/store/open.h"

#include "drover/store/sqlite/sqlite_store.h"

namespace drover::store {

bool IsEtcdSpec(const std::string& spec) { return spec.rfind("etcd://", 0) == 0; }

Result<std::unique_ptr<Store>> OpenStore(const std::string& spec, const std::string& default_sqlite_path,
                                         const EtcdOptions& etcd, Clock* clock) {
  if (spec.empty()) return OpenSqliteStore(default_sqlite_path, clock);
  if (spec.rfind("sqlite:", 0) == 0) {
    std::string path = spec.substr(7);
    if (path.empty()) return InvalidArgument("--store sqlite: needs a path (sqlite:/var/lib/drover/drover.db)");
    return OpenSqliteStore(path, clock);
  }
  if (IsEtcdSpec(spec)) {
    DROVER_ASSIGN_OR_RETURN(EtcdOptions parsed, ParseEtcdUrl(spec));
    EtcdOptions options = etcd;
    options.endpoints = std::move(parsed.endpoints);
    options.key_prefix = std::move(parsed.key_prefix);
    return OpenEtcdStore(options);
  }
  return InvalidArgument("--store '" + spec +
                         "' is neither sqlite:PATH nor etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]");
}

}  // namespace drover::store
