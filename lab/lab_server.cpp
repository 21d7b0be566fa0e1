// The page-size lab in a browser (lab_server.h).
#include "lab/lab_server.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "lab/lab_options.h"
#include "lab/lab_run.h"
#include "lab/page_size_costs.h"

#if defined(UVM_HAVE_HTTPLIB)
#include <httplib.h>
#endif

namespace uvm::lab {

// lab_page.html, built into the binary by CMake (lab_page.cpp in the build).
extern const char *const kLabPageHtml;

namespace {

bool fail(std::string *why, const std::string &text) {
    *why = text;
    return false;
}

}  // namespace

bool query_to_args(const std::vector<std::pair<std::string, std::string>> &params, std::vector<std::string> *args,
                   std::string *why) {
    // --machine first: the flags after it change parts of its model.
    static const char *const keys[] = {"machine", "workload", "footprint_mib", "accesses", "stride", "gpu_mib",
                                       "policy",  "costs",    "sweep",         "sms",      "l1",     "l2",
                                       "pwc",     "latency"};
    std::vector<std::string> out;
    for (const auto &p : params) {
        bool known = false;
        for (const char *k : keys)
            known = known || p.first == k;
        if (!known)
            return fail(why, "unknown parameter '" + p.first + "'");
    }
    for (const char *k : keys)
        for (const auto &p : params)
            if (p.first == k && !p.second.empty()) {  // an empty field: the command's default
                std::string flag = std::string("--") + k;
                for (char &c : flag)
                    if (c == '_')
                        c = '-';
                out.push_back(flag);
                out.push_back(p.second);
            }
    *args = std::move(out);
    return true;
}

#if defined(UVM_HAVE_HTTPLIB)

namespace {

constexpr uint64_t M = 1ull << 20;

// What one request may ask for. A class shares one server: these keep any one
// page from holding it for minutes or taking the machine's memory (the
// simulator keeps a bit per 4 KiB page and the page tree of every object).
constexpr uint64_t kMaxFootprint = 64ull << 30;       // exercise 7's 64 GiB
constexpr uint64_t kMaxAccesses = 5000000;            // a few seconds per policy
constexpr uint64_t kMaxSweepAccesses = 20000000;      // over every point and policy
constexpr uint64_t kMaxTraceBytes = 16ull << 20;      // an uploaded trace
constexpr uint32_t kMaxSms = 1024;
constexpr uint32_t kMaxTlbEntries = 1u << 20;

std::string mib(uint64_t bytes) {
    return std::to_string(bytes / M) + " MiB";
}

bool check_limits(const LabOptions &o, std::string *why) {
    if (!o.validate.empty() || !o.chase.empty() || !o.svg.empty() || !o.serve_port.empty() || !o.trace.empty())
        return fail(why, "that option is not for the page");
    if (o.work.footprint > kMaxFootprint)
        return fail(why, "footprint " + mib(o.work.footprint) + " is more than the page allows (" +
                             mib(kMaxFootprint) + ")");
    if (o.sweep_hi * M > kMaxFootprint)
        return fail(why, "a sweep up to " + std::to_string(o.sweep_hi) + " MiB is more than the page allows (" +
                             mib(kMaxFootprint) + ")");
    if (o.work.accesses > kMaxAccesses)
        return fail(why, std::to_string(o.work.accesses) + " accesses is more than the page allows (" +
                             std::to_string(kMaxAccesses) + ")");
    if (o.sweep_hi) {
        uint64_t points = 0;
        for (uint64_t m = o.sweep_lo; m <= o.sweep_hi; m *= 2)
            ++points;
        if (points * o.policies.size() * o.work.accesses > kMaxSweepAccesses)
            return fail(why, "the sweep would make " + std::to_string(points * o.policies.size() * o.work.accesses) +
                                 " accesses, more than the page allows (" + std::to_string(kMaxSweepAccesses) +
                                 "): fewer accesses or a narrower sweep");
    }
    if (o.model.sms > kMaxSms || o.model.l1.entries > kMaxTlbEntries || o.model.l2.entries > kMaxTlbEntries ||
        o.model.pwc_entries > kMaxTlbEntries)
        return fail(why, "the machine model is larger than the page allows (at most 1024 SMs and 2^20 TLB entries)");
    if (o.policies.empty())
        return fail(why, "pick at least one policy");
    return true;
}

// A trace within the page's limits: every line well formed, and the objects
// it allocates no larger in all than a footprint may be. "line N: why".
bool check_trace(const std::string &path, std::string *why) {
    TraceReader reader;
    if (!reader.open(path))
        return fail(why, reader.error());
    uint64_t allocated = 0;
    bool any_alloc = false;
    for (;;) {
        const TraceReader::Event e = reader.next();
        if (e.kind == TraceReader::Kind::End)
            return any_alloc || fail(why, "the trace allocates nothing (no 'alloc BASE SIZE' line): nothing to run");
        any_alloc = any_alloc || e.kind == TraceReader::Kind::Alloc;
        if (e.kind == TraceReader::Kind::Error)
            return fail(why, "the trace: " + reader.error());
        if (e.kind == TraceReader::Kind::Alloc) {
            allocated += e.size;
            if (e.size > kMaxFootprint || allocated > kMaxFootprint)
                return fail(why, "the trace: line " + std::to_string(reader.line()) + ": it allocates more than " +
                                     mib(kMaxFootprint) + " in all, more than the page allows");
        }
    }
}


void bad_request(httplib::Response &res, const std::string &why) {
    res.status = 400;
    res.set_content("uvm-lab: " + why + "\n", "text/plain; charset=utf-8");
}

std::string command_of(const std::vector<std::string> &args, bool trace) {
    std::string s = "uvm-lab";
    for (const std::string &a : args)
        s += " " + a;
    return trace ? s + " --trace FILE" : s;
}

// A temporary file holding an uploaded trace, removed when done.
struct TraceFile {
    std::string path;
    ~TraceFile() {
        if (!path.empty())
            ::unlink(path.c_str());
    }
    bool write(const std::string &body) {
        char name[] = "/tmp/uvm-lab-trace-XXXXXX";
        const int fd = ::mkstemp(name);
        if (fd < 0)
            return false;
        path = name;
        size_t done = 0;
        while (done < body.size()) {
            const ssize_t n = ::write(fd, body.data() + done, body.size() - done);
            if (n <= 0) {
                ::close(fd);
                return false;
            }
            done += size_t(n);
        }
        return ::close(fd) == 0;
    }
};

}  // namespace

int serve_lab(const std::string &address, uint16_t port, const std::string &calibration) {
    httplib::Server http;
    // One simulation at a time: a class shares the machine, and the limits
    // above are per request.
    std::mutex running;
    // Read uploads up to four times the limit, so that one a little over it
    // is answered with a sentence (400); past that httplib refuses it unread
    // (413, the sentence from the error handler below).
    http.set_payload_max_length(4 * kMaxTraceBytes);
    const auto handle_run = [&](const httplib::Request &req, httplib::Response &res, bool with_trace) {
        // The settings come from the query string only: httplib also reads a
        // form-encoded body into req.params, and the body is the trace.
        httplib::Params query;
        const size_t mark = req.target.find('?');
        if (mark != std::string::npos)
            httplib::detail::parse_query_text(req.target.substr(mark + 1), query);
        std::vector<std::pair<std::string, std::string>> params(query.begin(), query.end());
        std::vector<std::string> args;
        std::string why;
        LabOptions o;
        if (!query_to_args(params, &args, &why) || !parse_options(args, &o, &why) || !check_limits(o, &why))
            return bad_request(res, why);
        o.calibration = calibration;
        TraceFile trace;
        if (with_trace) {
            if (req.body.empty())
                return bad_request(res, "the trace is empty: upload a file in the lab's trace format");
            if (req.body.size() > kMaxTraceBytes)
                return bad_request(res, "the trace is " + mib(req.body.size()) + ", more than the page allows (" +
                                            mib(kMaxTraceBytes) + "): replay it with the command");
            // The reader reads lines as C strings: a NUL would end one silently.
            const size_t nul = req.body.find('\0');
            if (nul != std::string::npos)
                return bad_request(res, "the trace: line " +
                                            std::to_string(1 + std::count(req.body.begin(), req.body.begin() + long(nul), '\n')) +
                                            ": a NUL byte; the lab's traces are text (alloc, free, r, w lines)");
            if (!trace.write(req.body)) {
                res.status = 500;
                res.set_content("uvm-lab: cannot keep the uploaded trace\n", "text/plain; charset=utf-8");
                return;
            }
            if (!check_trace(trace.path, &why))
                return bad_request(res, why);
            o.trace = trace.path;
        }
        LabOutcome r;
        {
            std::lock_guard<std::mutex> one(running);
            if (!compute(o, &r, &why))
                return bad_request(res, why);
        }
        std::string json = outcome_json(o, r);
        json.insert(1, "\"command\":" + json_string(command_of(args, with_trace)) + ",");
        res.set_content(json, "application/json");
    };
    http.Get("/", [](const httplib::Request &, httplib::Response &res) {
        res.set_content(kLabPageHtml, "text/html; charset=utf-8");
    });
    http.Get("/api/run", [&](const httplib::Request &req, httplib::Response &res) { handle_run(req, res, false); });
    http.Post("/api/run", [&](const httplib::Request &req, httplib::Response &res) { handle_run(req, res, true); });
    http.Get("/api/validate", [&](const httplib::Request &, httplib::Response &res) {
        std::vector<Measurement> rows;
        std::string why;
        if (load_calibration(calibration, &rows, &why) != UVM_OK) {
            res.status = 500;
            res.set_content("uvm-lab: " + why + "\n", "text/plain; charset=utf-8");
            return;
        }
        std::string json = "[";
        for (const std::string &d : calibration_devices(rows)) {
            std::vector<Validation> v;
            if (validate_costs(rows, d, &v, &why) != UVM_OK)
                continue;  // a device the model cannot be fitted to: the CLI says why
            json += (json.size() > 1 ? "," : "") + std::string("{\"device\":") + json_string(d) + ",\"rows\":[";
            for (size_t i = 0; i < v.size(); ++i) {
                char row[320];
                std::snprintf(row, sizeof row,
                              "%s{\"quantity\":\"%s\",\"bytes\":%" PRIu64 ",\"page_bytes\":%" PRIu64
                              ",\"measured_us\":%.17g,\"model_us\":%.17g,\"held_out_us\":%.17g}",
                              i ? "," : "", v[i].quantity.c_str(), v[i].bytes, v[i].page_bytes, v[i].measured_us,
                              v[i].model_us, v[i].held_out_us);
                json += row;
            }
            json += "]}";
        }
        res.set_content(json + "]", "application/json");
    });
    // httplib's own refusals (no such path, an upload too large to read) get
    // a sentence too; the handlers' answers, which have one, are kept.
    http.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty())
            return;
        std::string why = "HTTP " + std::to_string(res.status);
        if (res.status == 404)
            why = "no such page: " + req.path + " (the lab is at /, its results at /api/run)";
        else if (res.status == 413)
            why = "the upload is more than " + mib(4 * kMaxTraceBytes) + ", more than the page allows";
        res.set_content("uvm-lab: " + why + "\n", "text/plain; charset=utf-8");
    });
    http.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr) {
        res.status = 500;
        res.set_content("uvm-lab: the request failed inside the server\n", "text/plain; charset=utf-8");
    });
    int bound = port;
    if (port == 0)
        bound = http.bind_to_any_port(address.c_str());
    else if (!http.bind_to_port(address.c_str(), port))
        bound = -1;
    if (bound <= 0) {
        std::fprintf(stderr, "uvm-lab: cannot listen on %s:%u\n", address.c_str(), unsigned(port));
        return 1;
    }
    const bool v6 = address.find(':') != std::string::npos;
    std::printf("uvm-lab: serving the page-size lab on http://%s%s%s:%d/\n", v6 ? "[" : "", address.c_str(),
                v6 ? "]" : "", bound);
    std::fflush(stdout);
    return http.listen_after_bind() ? 0 : 1;
}

#else

int serve_lab(const std::string &, uint16_t, const std::string &) {
    std::fprintf(stderr, "uvm-lab: --serve is not supported: built without cpp-httplib (Debian: libcpp-httplib-dev)\n");
    return 2;
}

#endif

}  // namespace uvm::lab
