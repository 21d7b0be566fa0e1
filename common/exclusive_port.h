// The socket options of a server that owns its port (uvm_metrics_serve,
// uvm-lab --serve), in place of cpp-httplib's default ones: those set
// SO_REUSEPORT, with which a second socket of the same user binds a port
// that another listens on, and the kernel then splits the connections
// between the two (one Prometheus target alternating between two
// processes). SO_REUSEADDR alone still binds over connections left in
// TIME_WAIT by a server just stopped, and refuses a port another socket
// listens on (EADDRINUSE: ADDRESS_IN_USE).
#pragma once

#include <sys/socket.h>

namespace uvm {

inline void exclusive_port_options(int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

}  // namespace uvm
