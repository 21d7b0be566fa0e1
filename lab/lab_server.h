// The page-size lab in a browser: `uvm-lab --serve PORT` serves one page
// (lab/lab_page.html, built into the binary) where a student picks the
// workload, footprint, GPU preset and policies and sees the command's tables
// and plots, and a JSON endpoint that computes them through the command's own
// code (lab_run.h):
//   GET  /                the page; its settings travel in the query string
//   GET  /api/run?...     the results; the keys are the command's flags
//                         without "--" and with '_' for '-' (workload,
//                         footprint_mib, accesses, policy, machine, costs, ...)
//   POST /api/run?...     the same over the trace in the body (the lab's format)
//   GET  /api/validate    the cost model's leave-one-out table, every GPU
// Bad input (an unknown workload, an absurd footprint, a malformed trace)
// gets HTTP 400 and a sentence; the server keeps serving. It listens on
// loopback unless --bind says otherwise: it is a teaching tool, not a
// service to expose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uvm::lab {

// Serves until killed; prints "serving on http://ADDRESS:PORT/" (the port
// picked where `port` is 0) first. Returns the exit status: 1 where it cannot
// listen, 2 where built without cpp-httplib (not supported).
int serve_lab(const std::string &address, uint16_t port, const std::string &calibration);

// The command's words for a query's parameters (exposed for tests): false
// with why for an unknown key, or a value past the server's limits.
bool query_to_args(const std::vector<std::pair<std::string, std::string>> &params, std::vector<std::string> *args,
                   std::string *why);

}  // namespace uvm::lab
