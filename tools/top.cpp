// uvm-tool top: a terminal view of a manager that refreshes, per GPU and
// client, drawn from the manager's JSON snapshot (uvm_manager_snapshot), so
// that the view of a runtime in another process (its /snapshot endpoint,
// uvm_metrics_serve) and of a manager in this one are the same.
//
// Its options are top.h's TopOptions (uvm-tool --help top). Needs
// nlohmann-json (to read the snapshot); --url needs cpp-httplib (endpoint.h).
#include "tools/top.h"

#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>

#if defined(UVM_HAVE_NLOHMANN_JSON)

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_writer.h"
#include "tools/endpoint.h"
#include <uvm/uvm.h>

namespace {

using nlohmann::json;
using uvm::size_text;

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::string bar(uint64_t part, uint64_t whole, int width) {
    const int filled = whole ? static_cast<int>(static_cast<double>(part) / whole * width + 0.5) : 0;
    std::string b = "[";
    for (int i = 0; i < width; ++i)
        b += i < filled ? '#' : '.';
    return b + "]";
}

uint64_t u(const json &j, const char *key) { return j.contains(key) ? j[key].get<uint64_t>() : 0; }

// Counters of the previous frame, for rates.
struct Previous {
    double time = 0;
    std::map<uint64_t, uint64_t> evictions, restores, ooms;
};

std::string render(const json &snap, const std::string &source, double interval, Previous *prev) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    const double dt = prev->time ? now - prev->time : 0;
    std::string out;
    char line[512];
    std::time_t wall = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", std::localtime(&wall));
    std::snprintf(line, sizeof(line), "uvm top - %s - every %.1f s - %s\n\n", source.c_str(), interval, stamp);
    out += line;
    std::snprintf(line, sizeof(line), "%-3s %-28s %-40s %10s %10s %10s %10s %8s %8s %5s\n", "GPU", "NAME",
                  "HELD / TOTAL", "USED", "EVICTABLE", "EVICTED", "LARGEST", "EVICT/s", "RESTR/s", "OOMS");
    out += line;
    for (const json &g : snap["gpus"]) {
        const uint64_t idx = u(g, "index");
        uint64_t pinned = 0, evictable = 0;
        for (const auto &c : g["chunks"].items()) {
            pinned += u(c.value(), "pinned");
            evictable += u(c.value(), "evictable");
        }
        const uint64_t held = u(g, "held"), total = u(g, "memory_total");
        const json &ev = g["eviction"];
        const uint64_t evictions = u(ev, "evictions"), restores = u(ev, "restores"), ooms = u(g, "oom_total");
        auto rate = [&](std::map<uint64_t, uint64_t> &m, uint64_t v) {
            const double r = dt > 0 && m.count(idx) ? (v - m[idx]) / dt : 0;
            m[idx] = v;
            return r;
        };
        const double er = rate(prev->evictions, evictions), rr = rate(prev->restores, restores);
        std::string name = g["name"].get<std::string>().substr(0, 28);
        const std::string held_text = bar(held, total, 12) + " " + size_text(held) + " / " + size_text(total);
        std::snprintf(line, sizeof(line), "%-3" PRIu64 " %-28s %-40s %10s %10s %10s %10s %8.1f %8.1f %5" PRIu64 "\n", idx,
                      name.c_str(), held_text.c_str(), size_text(pinned + evictable).c_str(),
                      size_text(evictable).c_str(), size_text(u(ev, "evicted_bytes")).c_str(),
                      size_text(u(g, "largest_free_block")).c_str(), er, rr, ooms);
        out += line;
    }
    prev->time = now;
    out += "\n";
    std::snprintf(line, sizeof(line), "%-20s %-3s %-40s %10s %8s %8s\n", "CLIENT", "GPU", "USED / BUDGET",
                  "EVICTABLE", "BUDGET%", "OBJECTS");
    out += line;
    if (snap.contains("clients"))
        for (const json &c : snap["clients"]) {
            const bool is_default = c.contains("default");
            bool first = true;
            for (const json &g : c["gpus"]) {
                const uint64_t used = u(g, "used"), budget = u(g, "budget");
                if (!used && !budget)
                    continue;
                char pct[16] = "-";
                if (budget)
                    std::snprintf(pct, sizeof(pct), "%.0f%%", 100.0 * used / budget);
                const std::string ub = (budget ? bar(used, budget, 10) + " " : std::string()) + size_text(used) +
                                       " / " + (budget ? size_text(budget) : std::string("none"));
                char objects[24] = "";
                if (first && !is_default)
                    std::snprintf(objects, sizeof(objects), "%" PRIu64, u(c, "objects"));
                std::snprintf(line, sizeof(line), "%-20s %-3" PRIu64 " %-40s %10s %8s %8s\n",
                              first ? c["name"].get<std::string>().substr(0, 20).c_str() : "", u(g, "gpu"), ub.c_str(),
                              is_default ? "" : size_text(u(g, "evictable")).c_str(), pct, objects);
                out += line;
                first = false;
            }
            if (!is_default && (u(c, "sysmem_used") || u(c, "sysmem_budget"))) {
                const uint64_t used = u(c, "sysmem_used"), budget = u(c, "sysmem_budget");
                std::snprintf(line, sizeof(line), "%-20s %-3s %-40s\n", first ? c["name"].get<std::string>().c_str() : "",
                              "sys", (size_text(used) + " / " + (budget ? size_text(budget) : "none")).c_str());
                out += line;
            }
        }
    const json &m = snap["manager"];
    std::snprintf(line, sizeof(line),
                  "\nobjects %" PRIu64 " (sysmem %" PRIu64 ", %s; managed %" PRIu64 ")   streams %" PRIu64
                  "   retiring %s   stream pools %s\n",
                  u(m, "objects"), u(m, "sysmem_objects"), size_text(u(m, "sysmem_bytes")).c_str(),
                  u(m, "managed_objects"), u(m, "streams"), size_text(u(m, "retiring_bytes")).c_str(),
                  size_text(u(m, "stream_pool_bytes")).c_str());
    out += line;
    return out;
}

// The snapshot of a manager in this process.
bool local_snapshot(uvm_manager_t *mgr, std::string *out) {
    for (int attempt = 0; attempt < 10; ++attempt) {
        size_t needed = 0;
        uvm_manager_snapshot(mgr, nullptr, 0, &needed);
        out->assign(needed + 4096, '\0');
        if (uvm_manager_snapshot(mgr, &(*out)[0], out->size(), &needed) == UVM_OK) {
            out->resize(needed - 1);
            return true;
        }
    }
    return false;
}

// A workload to watch: a trainer with a budget on GPU 0 (pinned weights,
// evictable activations), an inference server on GPU 1, and a cache of
// discardable objects on GPU 0 that the others push out.
struct Demo {
    uvm_manager_t *mgr = nullptr;
    std::vector<std::thread> threads;
    std::atomic<bool> stop{false};
    std::vector<uvm_client_t *> clients;

    bool start() {
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.backend = UVM_BACKEND_SIM;
        p.sim.gpu_count = 2;
        p.sim.vidmem_size = 1ull << 30;
        if (uvm_manager_create(&p, &mgr) != UVM_OK)
            return false;
        struct Role {
            const char *name;
            uint32_t gpu;
            uint64_t budget;
            uint32_t flags;
            uint64_t max_object;
            size_t max_live;
        };
        static const Role roles[] = {{"trainer", 0, 640ull << 20, UVM_MEM_EVICTABLE, 48ull << 20, 24},
                                     {"inference", 1, 512ull << 20, 0, 32ull << 20, 20},
                                     {"kv-cache", 0, 0, UVM_MEM_DISCARDABLE, 16ull << 20, 40}};
        for (const Role &r : roles) {
            uvm_client_t *c = nullptr;
            if (uvm_client_create(mgr, r.name, &c) != UVM_OK)
                return false;
            if (r.budget)
                uvm_client_set_budget(mgr, c, r.gpu, r.budget);
            clients.push_back(c);
            threads.emplace_back([this, r, c] {
                std::mt19937_64 rng(std::hash<std::string>()(r.name));
                std::vector<uvm_mem_t *> live;
                while (!stop) {
                    if (live.size() < r.max_live && rng() % 3 != 0) {
                        uvm_mem_alloc_params_t a;
                        std::memset(&a, 0, sizeof(a));
                        a.backing = UVM_BACKING_VIDMEM;
                        a.gpu = r.gpu;
                        a.size = (rng() % r.max_object) + 4096;
                        a.flags = r.flags;
                        a.client = c;
                        a.tag = r.name;
                        uvm_mem_t *m = nullptr;
                        if (uvm_mem_alloc(mgr, &a, &m) == UVM_OK)
                            live.push_back(m);
                    } else if (!live.empty()) {
                        const size_t i = rng() % live.size();
                        if (rng() % 2)
                            uvm_mem_make_resident(mgr, live[i]);  // used again: brought back if evicted
                        else {
                            uvm_mem_free(mgr, live[i]);
                            live[i] = live.back();
                            live.pop_back();
                        }
                    }
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
                for (uvm_mem_t *m : live)
                    uvm_mem_free(mgr, m);
            });
        }
        return true;
    }
    void finish() {
        stop = true;
        for (auto &t : threads)
            t.join();
        for (uvm_client_t *c : clients)
            uvm_client_destroy(mgr, c);
        if (mgr)
            uvm_manager_destroy(mgr);
    }
};

}  // namespace

namespace uvm::tool {

int run_top(const TopOptions &o) {
    const std::string &url = o.url;
    const bool demo = o.demo, plain = o.plain;
    const double interval = o.interval;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    Demo d;
    uvm_metrics_server_t *server = nullptr;
    std::string source = url;
    if (demo) {
        if (!d.start()) {
            std::fprintf(stderr, "uvm-tool top: the demo could not start\n");
            d.finish();
            return 1;
        }
        source = "demo: 3 clients on 2 simulated GPUs of 1 GiB";
        if (o.serve >= 0) {
            uint16_t port = 0;
            const uvm_status_t s =
                uvm_metrics_serve(d.mgr, "127.0.0.1", static_cast<uint16_t>(o.serve), &server, &port);
            if (s != UVM_OK) {
                std::fprintf(stderr, "uvm-tool top: cannot serve: %s\n", uvm_status_string(s));
                d.finish();
                return 1;
            }
            source += ", serving http://127.0.0.1:" + std::to_string(port) + "/metrics";
        }
    }
    Previous prev;
    int rc = 0;
    for (uint64_t frame = 0; !g_stop && (o.count == 0 || frame < o.count); ++frame) {
        std::this_thread::sleep_for(std::chrono::duration<double>(frame == 0 && !demo ? 0 : interval));
        std::string text;
        bool ok = false;
        if (demo) {
            ok = local_snapshot(d.mgr, &text);
        } else {
            std::string why;
            ok = fetch_endpoint(url, "/snapshot", &text, &why);
            if (!ok)
                std::fprintf(stderr, "uvm-tool top: %s\n", why.c_str());
        }
        json snap;
        if (ok) {
            snap = json::parse(text, nullptr, false);
            ok = !snap.is_discarded() && snap.contains("gpus");
            if (!ok)
                std::fprintf(stderr, "uvm-tool top: %s/snapshot is not a uvm manager's snapshot\n", source.c_str());
        }
        if (!ok) {
            rc = 1;
            break;
        }
        const std::string view = render(snap, source, interval, &prev);
        if (!plain)
            std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
        std::fputs(view.c_str(), stdout);
        if (plain)
            std::fputs("\n", stdout);
        std::fflush(stdout);
    }
    if (server)
        uvm_metrics_stop(d.mgr, server);
    if (demo)
        d.finish();
    return rc;
}

}  // namespace uvm::tool

#else  // no nlohmann-json

int uvm::tool::run_top(const TopOptions &) {
    std::fprintf(stderr, "uvm-tool top: this build has no JSON reader (nlohmann-json) to read snapshots with\n");
    return 1;
}

#endif
