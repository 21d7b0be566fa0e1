// What a running process's manager serves (uvm_metrics_serve, or a runtime's
// own server of uvm_manager_snapshot and uvm_manager_metrics): uvm-tool stats,
// metrics and top read another process's figures through it, as nvidia-smi
// reads the driver's, never a manager of their own.
#pragma once

#include <string>

namespace uvm::tool {

// The port uvm's examples and docs serve on (uvm.serve_metrics(mgr, 9400)).
constexpr const char *kDefaultUrl = "http://127.0.0.1:9400";

// GET `url` + `path` ("/snapshot", "/metrics") into `body`. false with why
// where this build has no HTTP client, nothing answers, or the reply is an
// HTTP error.
bool fetch_endpoint(const std::string &url, const std::string &path, std::string *body, std::string *why);

// The whole of a file a process wrote (its snapshot, its metrics) into
// `body`; false with why where it cannot be read.
bool read_file(const std::string &path, std::string *body, std::string *why);

}  // namespace uvm::tool
