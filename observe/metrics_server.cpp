#include "observe/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/exclusive_port.h"
#include "observe/report.h"

#if defined(UVM_HAVE_HTTPLIB)
#include <httplib.h>
#endif

namespace uvm {

#if defined(UVM_HAVE_HTTPLIB)

namespace {

// An IPv4 or IPv6 address in numeric form, as uvm.h asks for. Anything else
// is the caller's mistake, told apart from an address that cannot be had
// (ADDRESS_IN_USE); no name is looked up.
bool is_ip_address(const char *address) {
    unsigned char buf[sizeof(in6_addr)];
    return inet_pton(AF_INET, address, buf) == 1 || inet_pton(AF_INET6, address, buf) == 1;
}

}  // namespace

struct MetricsServers::Server {
    httplib::Server http;
    std::thread thread;
};

uvm_status_t MetricsServers::serve(const char *address, uint16_t port, uvm_metrics_server_t **out, uint16_t *bound) {
    if (!address || !out || !is_ip_address(address))
        return UVM_ERR_INVALID_ARGUMENT;
    auto s = std::make_unique<Server>();
    s->http.set_socket_options(exclusive_port_options);  // never a port another server holds
    Manager &mgr = mgr_;
    s->http.Get("/metrics", [&mgr](const httplib::Request &, httplib::Response &res) {
        res.set_content(metrics_text(mgr), "text/plain; version=0.0.4; charset=utf-8");
    });
    s->http.Get("/snapshot", [&mgr](const httplib::Request &, httplib::Response &res) {
        res.set_content(snapshot_json(mgr), "application/json");
    });
    int p = port;
    if (port == 0) {
        p = s->http.bind_to_any_port(address);
    } else if (!s->http.bind_to_port(address, port)) {
        p = -1;
    }
    if (p <= 0)
        return UVM_ERR_ADDRESS_IN_USE;
    Server *raw = s.get();
    s->thread = std::thread([raw] { raw->http.listen_after_bind(); });
    // Return only once it listens: a stop() that came before would be lost
    // (cpp-httplib's stop acts on a running server only).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!raw->http.is_running() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (!raw->http.is_running()) {  // it could not listen after all
        raw->http.stop();
        s->thread.join();
        return UVM_ERR_ADDRESS_IN_USE;
    }
    {
        std::lock_guard<std::mutex> guard(lock_);
        servers_.push_back(std::move(s));
    }
    if (bound)
        *bound = static_cast<uint16_t>(p);
    *out = reinterpret_cast<uvm_metrics_server_t *>(raw);
    return UVM_OK;
}

uvm_status_t MetricsServers::stop(const uvm_metrics_server_t *handle) {
    std::unique_ptr<Server> s;
    {
        std::lock_guard<std::mutex> guard(lock_);
        for (auto it = servers_.begin(); it != servers_.end(); ++it)
            if (reinterpret_cast<const uvm_metrics_server_t *>(it->get()) == handle) {
                s = std::move(*it);
                servers_.erase(it);
                break;
            }
    }
    if (!s)
        return UVM_ERR_INVALID_HANDLE;
    s->http.stop();
    s->thread.join();
    return UVM_OK;
}

void MetricsServers::stop_all() {
    std::vector<std::unique_ptr<Server>> all;
    {
        std::lock_guard<std::mutex> guard(lock_);
        all.swap(servers_);
    }
    for (auto &s : all) {
        s->http.stop();
        s->thread.join();
    }
}

#else  // no cpp-httplib in this build

struct MetricsServers::Server {};

uvm_status_t MetricsServers::serve(const char *address, uint16_t, uvm_metrics_server_t **out, uint16_t *) {
    return !address || !out ? UVM_ERR_INVALID_ARGUMENT : UVM_ERR_NOT_SUPPORTED;
}
uvm_status_t MetricsServers::stop(const uvm_metrics_server_t *) { return UVM_ERR_INVALID_HANDLE; }
void MetricsServers::stop_all() {}

#endif

MetricsServers::MetricsServers(Manager &mgr) : mgr_(mgr) {}
MetricsServers::~MetricsServers() { stop_all(); }

}  // namespace uvm
