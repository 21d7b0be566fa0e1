// A running process's endpoint and files (endpoint.h). The one file of
// uvm-tool that includes cpp-httplib.
#include "tools/endpoint.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#if defined(UVM_HAVE_HTTPLIB)
#include <httplib.h>
#endif

namespace uvm::tool {

bool fetch_endpoint(const std::string &url, const std::string &path, std::string *body, std::string *why) {
#if defined(UVM_HAVE_HTTPLIB)
    std::unique_ptr<httplib::Client> cli;
    try {
        cli = std::make_unique<httplib::Client>(url);  // throws on a scheme other than http(s)
    } catch (const std::exception &e) {
        *why = "'" + url + "' is not an address to read (http://HOST:PORT): " + e.what();
        return false;
    }
    if (!cli->is_valid()) {
        *why = "'" + url + "' is not an address to read (http://HOST:PORT)";
        return false;
    }
    cli->set_connection_timeout(2);
    cli->set_read_timeout(5);
    const httplib::Result res = cli->Get(path.c_str());
    if (!res) {
        *why = "nothing answers at " + url + " (" + httplib::to_string(res.error()) +
               "): no process serves its metrics there (uvm_metrics_serve, uvm.serve_metrics)";
        return false;
    }
    if (res->status != 200) {
        *why = url + path + " answered HTTP " + std::to_string(res->status) + ", not a uvm manager's endpoint";
        return false;
    }
    *body = res->body;
    return true;
#else
    (void)url;
    (void)path;
    (void)body;
    *why = "this build has no HTTP client (cpp-httplib, Debian: libcpp-httplib-dev): read a file the process "
           "wrote instead (--file)";
    return false;
#endif
}

bool read_file(const std::string &path, std::string *body, std::string *why) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        *why = "cannot read " + path + ": " + std::strerror(errno);
        return false;
    }
    std::ostringstream all;
    all << in.rdbuf();
    *body = all.str();
    return true;
}

}  // namespace uvm::tool
