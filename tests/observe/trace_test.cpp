// The event trace (observe/trace.h): the Chrome trace is
// JSON a real parser reads with every span paired; memory per client in it
// ends where the clients' accounts are, also after the ring wrapped; bad
// input gives a status and changes nothing; teardown leaves a structured
// leak report.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/uvm/fixtures.h"
#if defined(UVM_HAVE_NLOHMANN_JSON)
#include <nlohmann/json.hpp>
#endif

using namespace uvm_test;

namespace {

constexpr uint64_t M = 1024 * 1024;

// While tracing is on the export grows between two calls: ask until it fits.
[[maybe_unused]] std::string export_trace(uvm_manager_t *mgr, uvm_trace_format_t format) {
    size_t needed = 0;
    EXPECT_EQ(uvm_trace_export(mgr, format, nullptr, 0, &needed), UVM_ERR_BUFFER_TOO_SMALL);
    for (int attempt = 0; attempt < 100; ++attempt) {
        std::string out(needed + needed / 4, '\0');
        const uvm_status_t s = uvm_trace_export(mgr, format, &out[0], out.size(), &needed);
        if (s == UVM_OK) {
            out.resize(needed - 1);
            return out;
        }
        EXPECT_EQ(s, UVM_ERR_BUFFER_TOO_SMALL);
    }
    ADD_FAILURE() << "the export never fit";
    return "";
}

// Every tag opened is closed, in order, and the document ends where it should.
// The texts of an SVG's elements of class `cls`, in order.
[[maybe_unused]] std::vector<std::string> svg_texts(const std::string &svg, const std::string &cls) {
    std::vector<std::string> out;
    const std::string key = "class=\"" + cls + "\"";
    for (size_t i = svg.find(key); i != std::string::npos; i = svg.find(key, i + 1)) {
        const size_t open = svg.find('>', i), close = svg.find('<', open);
        out.push_back(svg.substr(open + 1, close - open - 1));
    }
    return out;
}

// Tick labels ("2.5 ms", "512 KiB") make round axes: each axis (a run from
// 0) in one unit, its ticks `step` apart, the step round for `round_step`.
template <typename RoundStep>
void expect_round_ticks(const std::vector<std::string> &labels, const std::map<std::string, double> &units,
                        RoundStep round_step) {
    ASSERT_GE(labels.size(), 2u);
    std::string unit;
    double step = 0, last = 0;
    for (const std::string &label : labels) {
        const size_t space = label.find(' ');
        ASSERT_NE(space, std::string::npos) << label;
        const double v = std::stod(label.substr(0, space));
        const std::string u = label.substr(space + 1);
        ASSERT_TRUE(units.count(u)) << label;
        if (v == 0) {  // a new axis
            unit = u;
            step = 0;
        } else {
            EXPECT_EQ(u, unit) << label << ": one unit an axis";
            if (step == 0) {
                step = v - last;
                EXPECT_TRUE(round_step(step * units.at(u))) << label << ": a step of " << step << " " << u;
            }
            EXPECT_NEAR(v - last, step, 1e-9 * v) << label << ": ticks a step apart";
            EXPECT_LE(label.size() - space, 4u) << label;
        }
        last = v;
    }
}

[[maybe_unused]] void expect_round_trace_axes(const std::string &svg) {
    const std::map<std::string, double> times = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    expect_round_ticks(svg_texts(svg, "tick-time"), times, [](double ns) {
        const double decade = std::pow(10, std::floor(std::log10(ns) + 1e-9));
        const double m = ns / decade;
        return std::fabs(m - 1) < 1e-6 || std::fabs(m - 2) < 1e-6 || std::fabs(m - 2.5) < 1e-6 ||
               std::fabs(m - 5) < 1e-6;
    });
    const std::map<std::string, double> bytes = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                                 {"TiB", 1099511627776.0}};
    expect_round_ticks(svg_texts(svg, "tick-bytes"), bytes, [](double b) {
        const uint64_t n = static_cast<uint64_t>(std::llround(b));
        return std::fabs(b - static_cast<double>(n)) < 1e-6 && n && (n & (n - 1)) == 0;
    });
}

[[maybe_unused]] bool svg_balanced(const std::string &svg) {
    std::vector<std::string> open;
    for (size_t i = svg.find('<'); i != std::string::npos; i = svg.find('<', i + 1)) {
        const size_t end = svg.find('>', i);
        if (end == std::string::npos)
            return false;
        const std::string tag = svg.substr(i + 1, end - i - 1);
        if (tag.empty())
            return false;
        if (tag[0] == '/') {
            if (open.empty() || open.back() != tag.substr(1))
                return false;
            open.pop_back();
        } else if (tag.back() != '/') {
            open.push_back(tag.substr(0, tag.find_first_of(" \n")));
        }
    }
    return open.empty();
}

#if defined(UVM_HAVE_NLOHMANN_JSON)
struct ParsedTrace {
    std::map<std::string, int> balance;  // cat|id -> begins - ends
    std::map<std::string, int> begins_by_cat;
    int ooms = 0;
    // The last "memory" counter of each pid: series -> bytes.
    std::map<int, std::map<std::string, uint64_t>> last_memory;
    bool ends_after_begins = true;
    std::map<std::string, double> begin_ts;
    int before = 0, open_at_end = 0;
};

ParsedTrace parse_trace(const std::string &text) {
    ParsedTrace t;
    const nlohmann::json doc = nlohmann::json::parse(text);  // throws on bad JSON: the test fails
    EXPECT_TRUE(doc.contains("traceEvents"));
    double last_counter_ts = -1;
    for (const auto &e : doc["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "b" || ph == "e") {
            const std::string key = e["cat"].get<std::string>() + "|" + e["id"].get<std::string>();
            const double ts = e["ts"];
            if (ph == "b") {
                t.balance[key]++;
                t.begins_by_cat[e["cat"]]++;
                t.begin_ts[key] = ts;
                if (e["args"].contains("began_before_trace"))
                    t.before++;
            } else {
                t.balance[key]--;
                if (t.begin_ts.count(key) && ts < t.begin_ts[key])
                    t.ends_after_begins = false;
                if (e["args"].contains("open_at_end"))
                    t.open_at_end++;
            }
        } else if (ph == "i") {
            t.ooms++;
        } else if (ph == "C" && e["name"] == "memory") {
            const double ts = e["ts"];
            (void)last_counter_ts;
            auto &m = t.last_memory[e["pid"].get<int>()];
            m.clear();
            for (auto it = e["args"].begin(); it != e["args"].end(); ++it)
                m[it.key()] = it.value().get<uint64_t>();
            last_counter_ts = ts;
        }
    }
    return t;
}

void expect_all_paired(const ParsedTrace &t) {
    for (const auto &b : t.balance)
        EXPECT_EQ(b.second, 0) << "unpaired span " << b.first;
    EXPECT_TRUE(t.ends_after_begins);
}
#endif

}  // namespace

TEST(Trace, IsOffByDefaultAndRefusesBadInput) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_trace_info_t info;
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.enabled, 0);
    EXPECT_EQ(info.ring_bytes, 0u);
    size_t needed = 0;
    EXPECT_EQ(uvm_trace_export(mgr, UVM_TRACE_CHROME_JSON, nullptr, 0, &needed), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_trace_stop(mgr), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_trace_start(nullptr, 0), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_trace_start(mgr, 4096), UVM_ERR_INVALID_ARGUMENT);           // below 64 KiB
    EXPECT_EQ(uvm_trace_start(mgr, (8ull << 30)), UVM_ERR_INVALID_ARGUMENT);   // above 4 GiB
    EXPECT_EQ(uvm_trace_info(mgr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.enabled, 0);  // the refused starts changed nothing

    ASSERT_EQ(uvm_trace_start(mgr, 0), UVM_OK);
    EXPECT_EQ(uvm_trace_start(mgr, 0), UVM_ERR_BUSY);
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.enabled, 1);
    EXPECT_EQ(info.ring_bytes, 16ull << 20);
    EXPECT_EQ(info.capacity, (16ull << 20) / 64);
    EXPECT_EQ(uvm_trace_export(mgr, static_cast<uvm_trace_format_t>(7), nullptr, 0, &needed),
              UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_trace_export(mgr, UVM_TRACE_CHROME_JSON, nullptr, 5, &needed), UVM_ERR_INVALID_ARGUMENT);
    char tiny[4];
    EXPECT_EQ(uvm_trace_export(mgr, UVM_TRACE_SVG, tiny, sizeof(tiny), &needed), UVM_ERR_BUFFER_TOO_SMALL);
    EXPECT_GT(needed, sizeof(tiny));
    EXPECT_EQ(uvm_trace_export(nullptr, UVM_TRACE_SVG, tiny, sizeof(tiny), &needed), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_trace_stop(mgr), UVM_OK);
    EXPECT_EQ(uvm_trace_stop(mgr), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Trace, RecordsOnlyWhileOn) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_mem_t *before = alloc_owned(mgr, UVM_BACKING_VIDMEM, 2 * M, nullptr);
    ASSERT_EQ(uvm_trace_start(mgr, 64 << 10), UVM_OK);
    uvm_mem_t *during = alloc_owned(mgr, UVM_BACKING_VIDMEM, 2 * M, nullptr);
    ASSERT_EQ(uvm_mem_free(mgr, during), UVM_OK);
    ASSERT_EQ(uvm_trace_stop(mgr), UVM_OK);
    uvm_mem_t *after = alloc_owned(mgr, UVM_BACKING_VIDMEM, 2 * M, nullptr);
    uvm_trace_info_t info;
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.recorded, 2u);  // the alloc and the free while on
    EXPECT_EQ(info.overwritten, 0u);
    EXPECT_EQ(info.capacity, 1024u);
    // A new start clears the ring.
    ASSERT_EQ(uvm_trace_start(mgr, 64 << 10), UVM_OK);
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.recorded, 0u);
    ASSERT_EQ(uvm_trace_stop(mgr), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, before), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, after), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

#if defined(UVM_HAVE_NLOHMANN_JSON)
TEST(Trace, ChromeJsonPairsEverySpanAndEndsAtTheAccounts) {
    uvm_manager_t *mgr = small_sim(2, 64 * M);
    uvm_client_t *a = nullptr, *b = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "trainer", &a), UVM_OK);
    ASSERT_EQ(uvm_client_create(mgr, "cache", &b), UVM_OK);
    uvm_mem_t *old = alloc_owned(mgr, UVM_BACKING_VIDMEM, 4 * M, a, "weights");  // live before the trace
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, old, 0), UVM_OK);                // mapped before it too
    ASSERT_EQ(uvm_trace_start(mgr, 0), UVM_OK);

    uvm_mem_t *act = alloc_owned(mgr, UVM_BACKING_VIDMEM, 8 * M, a, "activations");
    uvm_mem_t *kv = alloc_owned(mgr, UVM_BACKING_VIDMEM, 6 * M, b, "kv", UVM_MEM_EVICTABLE);
    uvm_mem_t *host = alloc_owned(mgr, UVM_BACKING_SYSMEM, 1 * M, b, "staging");
    uvm_mem_t *peer = alloc_owned(mgr, UVM_BACKING_VIDMEM, 2 * M, nullptr, nullptr, 0, 1);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, act, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr, host), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_phys(mgr, host, 1), UVM_OK);
    ASSERT_EQ(uvm_mem_unmap_gpu_kernel(mgr, old, 0), UVM_OK);  // its map came before the trace
    ASSERT_EQ(uvm_mem_evict(mgr, kv), UVM_OK);
    ASSERT_EQ(uvm_mem_make_resident(mgr, kv), UVM_OK);
    ASSERT_EQ(uvm_mem_evict(mgr, kv), UVM_OK);  // stays evicted to the end
    // An OUT_OF_MEMORY: more than the GPU has left.
    uvm_eviction_policy_t off;
    std::memset(&off, 0, sizeof(off));
    off.disabled = 1;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &off), UVM_OK);
    uvm_mem_alloc_params_t big = alloc_params(UVM_BACKING_VIDMEM, 60 * M);
    uvm_mem_t *none = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &big, &none), UVM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(uvm_mem_free(mgr, act), UVM_OK);  // freed mapped: its mapping ends with it
    ASSERT_EQ(uvm_mem_free(mgr, peer), UVM_OK);

    const ParsedTrace t = parse_trace(export_trace(mgr, UVM_TRACE_CHROME_JSON));
    expect_all_paired(t);
    EXPECT_EQ(t.ooms, 1);
    // Objects: the old one (from before), act, kv, host, peer.
    EXPECT_EQ(t.begins_by_cat.at("object"), 5);
    // Mappings: act's kernel map and the physical one it made first, host's
    // cpu and phys maps, old's kernel map (from before).
    EXPECT_EQ(t.begins_by_cat.at("mapping"), 5);
    EXPECT_EQ(t.begins_by_cat.at("evicted"), 2);
    EXPECT_EQ(t.before, 2);       // the old object and its mapping
    EXPECT_EQ(t.open_at_end, 6);  // old, kv, host; kv's eviction; host's two mappings
    // The memory counters end where the accounts are.
    uvm_client_info_t ia, ib;
    ASSERT_EQ(uvm_client_info(mgr, a, &ia), UVM_OK);
    ASSERT_EQ(uvm_client_info(mgr, b, &ib), UVM_OK);
    EXPECT_EQ(t.last_memory.at(0).at("trainer"), ia.vidmem_used[0]);
    EXPECT_EQ(t.last_memory.at(0).at("cache"), ib.vidmem_used[0]);
    EXPECT_EQ(t.last_memory.at(1).at("default"), 0u);
    EXPECT_EQ(t.last_memory.at(2).at("cache"), ib.sysmem_used);  // pid 2: host
    EXPECT_EQ(t.last_memory.at(2).at("evicted"), 6 * M);

    const std::string svg = export_trace(mgr, UVM_TRACE_SVG);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_TRUE(svg_balanced(svg));
    EXPECT_NE(svg.find("trainer"), std::string::npos);
    EXPECT_NE(svg.find("GPU 1"), std::string::npos);
    EXPECT_NE(svg.find("out of memory"), std::string::npos);
    expect_round_trace_axes(svg);

    for (uvm_mem_t *m : {old, kv, host})
        EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, a), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, b), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Removing a GPU's physical mapping removes its virtual ones there: their
// spans end with it, not at the end of the trace.
TEST(Trace, APhysicalUnmapEndsTheVirtualMappingsOnThatGpu) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_mem_t *sys = alloc_owned(mgr, UVM_BACKING_SYSMEM, 64 * 1024, nullptr);
    ASSERT_EQ(uvm_trace_start(mgr, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr, sys, 0), UVM_OK);  // makes the phys mapping too
    ASSERT_EQ(uvm_mem_unmap_gpu_phys(mgr, sys, 0), UVM_OK);
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(mgr, sys, &info), UVM_OK);
    ASSERT_EQ(info.gpu_kernel_mask, 0u);
    const ParsedTrace t = parse_trace(export_trace(mgr, UVM_TRACE_CHROME_JSON));
    expect_all_paired(t);
    EXPECT_EQ(t.begins_by_cat.at("mapping"), 2);  // gpu_phys and gpu_kernel
    EXPECT_EQ(t.before, 1);                       // the object itself
    EXPECT_EQ(t.open_at_end, 1);                  // only the object: no mapping is left open
    EXPECT_EQ(uvm_mem_free(mgr, sys), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Trace, AWrappedRingStillAccountsForEveryByte) {
    uvm_manager_t *mgr = small_sim(1, 256 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "steady", &c), UVM_OK);
    ASSERT_EQ(uvm_trace_start(mgr, 64 << 10), UVM_OK);  // 1,024 records
    std::vector<uvm_mem_t *> keep;
    for (int i = 0; i < 5; ++i)  // their allocs will be overwritten
        keep.push_back(alloc_owned(mgr, UVM_BACKING_VIDMEM, (i + 1) * M, c, "kept"));
    for (int i = 0; i < 3000; ++i) {
        uvm_mem_t *m = alloc_owned(mgr, UVM_BACKING_VIDMEM, 64 * 1024, i % 2 ? c : nullptr);
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        if (i == 2900)  // freed inside the window, allocated before it
            ASSERT_EQ(uvm_mem_free(mgr, keep[0]), UVM_OK);
    }
    uvm_trace_info_t info;
    ASSERT_EQ(uvm_trace_info(mgr, &info), UVM_OK);
    EXPECT_EQ(info.recorded, 5u + 6000u + 1u);
    EXPECT_EQ(info.overwritten, info.recorded - 1024);
    const ParsedTrace t = parse_trace(export_trace(mgr, UVM_TRACE_CHROME_JSON));
    expect_all_paired(t);
    // The five kept ones began before the window, and maybe the one object
    // whose alloc is the last record lost.
    EXPECT_GE(t.before, 5);
    EXPECT_LE(t.before, 6);
    uvm_client_info_t ci;
    ASSERT_EQ(uvm_client_info(mgr, c, &ci), UVM_OK);
    EXPECT_EQ(ci.vidmem_used[0], (2 + 4 + 4 + 6) * M);  // whole 2M chunks
    EXPECT_EQ(t.last_memory.at(0).at("steady"), ci.vidmem_used[0]);
    EXPECT_EQ(t.last_memory.at(0).at("default"), 0u);
    EXPECT_TRUE(svg_balanced(export_trace(mgr, UVM_TRACE_SVG)));
    for (size_t i = 1; i < keep.size(); ++i)
        EXPECT_EQ(uvm_mem_free(mgr, keep[i]), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Threads allocate, map and free while another exports: every export is
// whole JSON with its spans paired, and TSan (this suite runs under it) sees
// no race between the records and the export.
TEST(TraceStress, ThreadsRecordWhileAnotherExports) {
    uvm_manager_t *mgr = small_sim(1, 512 * M);
    ASSERT_EQ(uvm_trace_start(mgr, 256 << 10), UVM_OK);
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    // At least one export while the threads run, however the machine
    // schedules them: each thread waits for the first before it finishes.
    std::atomic<int> exports{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
        threads.emplace_back([&, t] {
            uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, (t + 1) * 64 * 1024);
            for (int i = 0; i < 1500 && !stop; ++i) {
                uvm_mem_t *m = nullptr;
                if (uvm_mem_alloc(mgr, &p, &m) != UVM_OK || uvm_mem_map_gpu_kernel(mgr, m, 0) != UVM_OK ||
                    uvm_mem_free(mgr, m) != UVM_OK)
                    failures++;
            }
            while (exports.load() == 0)
                std::this_thread::yield();
        });
    std::thread exporter([&] {
        do {
            const ParsedTrace t = parse_trace(export_trace(mgr, UVM_TRACE_CHROME_JSON));
            expect_all_paired(t);
            ++exports;
        } while (!stop);
    });
    for (auto &th : threads)
        th.join();
    stop = true;
    exporter.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_GT(exports.load(), 0);
    ASSERT_EQ(uvm_trace_stop(mgr), UVM_OK);
    const ParsedTrace t = parse_trace(export_trace(mgr, UVM_TRACE_CHROME_JSON));
    expect_all_paired(t);
    EXPECT_EQ(t.last_memory.at(0).at("default"), 0u);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Trace, TheEnvironmentWritesTheTraceAtTeardown) {
    char dir[] = "/tmp/uvm-trace-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string prefix = std::string(dir) + "/run";
    ASSERT_EQ(setenv("UVM_TRACE", prefix.c_str(), 1), 0);
    testing::internal::CaptureStderr();
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const std::string started = testing::internal::GetCapturedStderr();
    EXPECT_NE(started.find(prefix + ".json and " + prefix + ".svg are written when the manager is destroyed"),
              std::string::npos) << started;
    EXPECT_EQ(uvm_trace_start(mgr, 0), UVM_ERR_BUSY);  // the environment started it
    uvm_mem_t *m = alloc_owned(mgr, UVM_BACKING_VIDMEM, 2 * M, nullptr, "env");
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // a span in milliseconds, for the axis
    m = alloc_owned(mgr, UVM_BACKING_VIDMEM, 6 * M, nullptr, "env");
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    testing::internal::CaptureStderr();
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
    const std::string said = testing::internal::GetCapturedStderr();
    unsetenv("UVM_TRACE");
    // Where the files went, said (the prefix is absolute here, as the message makes any).
    EXPECT_NE(said.find("the trace is in " + prefix + ".json"), std::string::npos) << said;
    EXPECT_NE(said.find(prefix + ".svg"), std::string::npos) << said;
    std::ifstream json(prefix + ".json"), svg(prefix + ".svg");
    ASSERT_TRUE(json.good());
    ASSERT_TRUE(svg.good());
    std::stringstream js, ss;
    js << json.rdbuf();
    ss << svg.rdbuf();
    expect_all_paired(parse_trace(js.str()));
    EXPECT_NE(js.str().find("[env]"), std::string::npos);
    EXPECT_TRUE(svg_balanced(ss.str()));
    expect_round_trace_axes(ss.str());
    std::remove((prefix + ".json").c_str());
    std::remove((prefix + ".svg").c_str());
    rmdir(dir);
}
#endif
