// The HTTP /metrics endpoint of a manager (uvm_metrics_serve), on cpp-httplib
// where the build found it; NOT_SUPPORTED otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "uvm/uvm.h"

namespace uvm {

class Manager;

class MetricsServers {
public:
    explicit MetricsServers(Manager &mgr);
    ~MetricsServers();  // stops every server
    uvm_status_t serve(const char *address, uint16_t port, uvm_metrics_server_t **out, uint16_t *bound);
    uvm_status_t stop(const uvm_metrics_server_t *handle);
    void stop_all();

    struct Server;

private:
    Manager &mgr_;
    std::mutex lock_;
    std::vector<std::unique_ptr<Server>> servers_;
};

}  // namespace uvm
