// fork(): the child gets a clear status from its parent's managers and
// touches nothing of theirs; managers it makes itself work; the parent's go
// on as before. (Sim: the CUDA driver itself cannot be used in a child
// forked after it was initialised.)
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t M = 1024 * 1024;

// In the child: the exit code says which check failed (0: all held).
int child_checks(uvm_manager_t *parent, uvm_mem_t *object) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M);
    uvm_mem_t *m = nullptr;
    if (uvm_mem_alloc(parent, &p, &m) != UVM_ERR_FORKED || m != nullptr)
        return 1;
    if (uvm_mem_free(parent, object) != UVM_ERR_FORKED)
        return 2;
    uvm_mem_info_t info;
    if (uvm_mem_info(parent, object, &info) != UVM_ERR_FORKED)
        return 3;
    uvm_gpu_stats_t st;
    if (uvm_gpu_stats(parent, 0, &st) != UVM_ERR_FORKED)
        return 4;
    if (uvm_manager_destroy(parent) != UVM_ERR_FORKED)
        return 5;
    if (std::strstr(uvm_status_string(UVM_ERR_FORKED), "parent") == nullptr)
        return 6;
    // A manager of its own works.
    uvm_manager_params_t mp = sim_params(1, 64 * M);
    uvm_manager_t *own = nullptr;
    if (uvm_manager_create(&mp, &own) != UVM_OK)
        return 7;
    if (uvm_mem_alloc(own, &p, &m) != UVM_OK || uvm_mem_free(own, m) != UVM_OK)
        return 8;
    if (uvm_manager_destroy(own) != UVM_OK)
        return 9;
    return 0;
}


// Every C function that names a manager, called with a parent's manager in a
// fork()ed child. Each takes arguments that would be good in the parent, so
// that only the fork can refuse it. Header functions are read back from the
// headers (below): a new call without a row here fails the suite.
struct EntryPoint {
    const char *name;
    uvm_status_t (*call)(uvm_manager_t *, uvm_mem_t *, uvm_stream_t *, uvm_client_t *);
};

#define ENTRY(fn, ...) {#fn, [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *s, uvm_client_t *c) -> uvm_status_t { \
    (void)o; (void)s; (void)c; return fn(g, __VA_ARGS__); }}
#define ENTRY0(fn) {#fn, [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { return fn(g); }}

uvm_mem_alloc_params_t two_mib() { return alloc_params(UVM_BACKING_VIDMEM, 2 * M); }
uvm_mem_span_t span(uvm_mem_t *o) {
    uvm_mem_span_t s;
    std::memset(&s, 0, sizeof(s));
    s.mem = o;
    return s;
}
uvm_backend_kind_t g_kind;
uint32_t g_u32;
uint64_t g_u64;
void *g_ptr;
char g_buf[1 << 16];
size_t g_needed;
uvm_mem_t *g_mem;
uvm_stream_t *g_stream;
uvm_client_t *g_client;
uvm_pool_t *g_pool;
int g_fd;
const uint32_t g_marks[1] = {50};
const uvm_sleep_policy_t g_sleep_policy = {UVM_SLEEP_HOST_RELEASE, 2 * M, 0};

const EntryPoint kEntryPoints[] = {
    ENTRY0(uvm_manager_destroy),
    ENTRY(uvm_manager_backend, &g_kind),
    ENTRY(uvm_gpu_count, &g_u32),
    {"uvm_gpu_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_gpu_info_t i; return uvm_gpu_info(g, 0, &i); }},
    ENTRY(uvm_gpu_trim, 0, &g_u64),
    ENTRY(uvm_gpu_set_release_threshold, 0, 0),
    ENTRY(uvm_gpu_set_growth_slack, 0, 0),
    {"uvm_host_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_host_info_t i; return uvm_host_info(g, &i); }},
    {"uvm_numa_node_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_numa_node_info_t i; return uvm_numa_node_info(g, 0, &i); }},
    {"uvm_gpu_path", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_gpu_path_t p; return uvm_gpu_path(g, 0, 0, &p); }},
    {"uvm_gpu_enable_peer_access", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { return uvm_gpu_enable_peer_access(g, 1, 0); }},
    {"uvm_gpu_malloc_async", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *s, uvm_client_t *) { const auto p = two_mib(); uint64_t a; return uvm_gpu_malloc_async(g, &p, s, &a, nullptr); }},
    {"uvm_gpu_free_async", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *s, uvm_client_t *) { return uvm_gpu_free_async(g, 0, uint64_t{1} << 30, s, nullptr, nullptr); }},
    {"uvm_mem_alloc", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { const auto p = two_mib(); return uvm_mem_alloc(g, &p, &g_mem); }},
    ENTRY(uvm_mem_free, o),
    {"uvm_mem_info", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { uvm_mem_info_t i; return uvm_mem_info(g, o, &i); }},
    ENTRY(uvm_mem_map_cpu_kernel, o),
    ENTRY(uvm_mem_unmap_cpu_kernel, o),
    ENTRY(uvm_mem_map_cpu_user, o, g_buf),
    ENTRY(uvm_mem_unmap_cpu_user, o),
    ENTRY(uvm_mem_map_gpu_phys, o, 0),
    ENTRY(uvm_mem_unmap_gpu_phys, o, 0),
    ENTRY(uvm_mem_map_gpu_kernel, o, 0),
    ENTRY(uvm_mem_unmap_gpu_kernel, o, 0),
    ENTRY(uvm_mem_map_gpu_user, o, 0, UINT64_C(1) << 40),
    ENTRY(uvm_mem_unmap_gpu_user, o, 0),
    ENTRY(uvm_user_range_reserve, 2 * M, &g_u64),
    ENTRY(uvm_user_range_release, UINT64_C(1) << 40),
    ENTRY(uvm_mem_cpu_kernel_address, o, 0, &g_ptr),
    ENTRY(uvm_mem_cpu_user_address, o, 0, &g_ptr),
    {"uvm_mem_gpu_phys_address", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { uvm_gpu_phys_address_t a; return uvm_mem_gpu_phys_address(g, o, 0, 0, 4096, &a); }},
    ENTRY(uvm_mem_gpu_kernel_address, o, 0, 0, &g_u64),
    ENTRY(uvm_mem_gpu_user_address, o, 0, 0, &g_u64),
    {"uvm_mem_copy", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { const auto d = span(o), s = span(o); return uvm_mem_copy(g, 0, &d, &s, 4096); }},
    {"uvm_mem_memset", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { const auto d = span(o); return uvm_mem_memset(g, 0, &d, 1, 4096); }},
    ENTRY(uvm_stream_create, 0, nullptr, &g_stream),
    ENTRY(uvm_stream_destroy, s),
    ENTRY(uvm_stream_native, s, &g_ptr),
    ENTRY(uvm_stream_synchronize, s),
    ENTRY(uvm_mem_record_use, o, s),
    ENTRY(uvm_pool_create, 0, &g_pool),
    ENTRY(uvm_pool_destroy, g_pool),
    ENTRY(uvm_stream_set_pool, s, g_pool),
    {"uvm_pool_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_pool_info_t i; return uvm_pool_info(g, g_pool, &i); }},
    {"uvm_mem_alloc_async", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *s, uvm_client_t *) { const auto p = two_mib(); return uvm_mem_alloc_async(g, &p, s, &g_mem); }},
    ENTRY(uvm_mem_free_async, o, s),
    {"uvm_mem_alloc_gpu", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *s, uvm_client_t *) { const auto p = two_mib(); return uvm_mem_alloc_gpu(g, &p, s, &g_mem, &g_u64); }},
    ENTRY(uvm_mem_lookup_gpu_kernel, 0, UINT64_C(1) << 40, &g_mem, &g_u64),
    {"uvm_mem_copy_async", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *s, uvm_client_t *) { const auto d = span(o), r = span(o); return uvm_mem_copy_async(g, 0, &d, &r, 4096, s); }},
    {"uvm_mem_memset_async", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *s, uvm_client_t *) { const auto d = span(o); return uvm_mem_memset_async(g, 0, &d, 1, 4096, s); }},
    ENTRY(uvm_mem_advise, o, UVM_ADVISE_SET_READ_MOSTLY, 0),
    ENTRY(uvm_mem_prefetch, o, 0, 4096, 0),
    {"uvm_gpu_page_tree_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_page_tree_info_t i; return uvm_gpu_page_tree_info(g, 0, UVM_VA_SPACE_KERNEL, &i); }},
    {"uvm_gpu_stats", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_gpu_stats_t st; return uvm_gpu_stats(g, 0, &st); }},
    {"uvm_manager_stats", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_manager_stats_t st; return uvm_manager_stats(g, &st); }},
    ENTRY(uvm_oom_report, UVM_REPORT_TEXT, g_buf, sizeof(g_buf), &g_needed),
    ENTRY(uvm_manager_snapshot, g_buf, sizeof(g_buf), &g_needed),
    ENTRY(uvm_manager_metrics, g_buf, sizeof(g_buf), &g_needed),
    {"uvm_metrics_serve", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_metrics_server_t *srv = nullptr; uint16_t port = 0; return uvm_metrics_serve(g, "127.0.0.1", 0, &srv, &port); }},
    {"uvm_metrics_stop", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { return uvm_metrics_stop(g, reinterpret_cast<uvm_metrics_server_t *>(g_buf)); }},
    ENTRY(uvm_objects_report, UVM_REPORT_JSON, g_buf, sizeof(g_buf), &g_needed),
    ENTRY(uvm_trace_start, 0),
    ENTRY0(uvm_trace_stop),
    {"uvm_trace_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_trace_info_t i; return uvm_trace_info(g, &i); }},
    ENTRY(uvm_trace_export, UVM_TRACE_CHROME_JSON, g_buf, sizeof(g_buf), &g_needed),
    ENTRY(uvm_mem_evict, o),
    ENTRY(uvm_mem_make_resident, o),
    ENTRY(uvm_mem_touch, o),
    {"uvm_mem_residency", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { uvm_residency_t r; return uvm_mem_residency(g, o, &r); }},
    {"uvm_gpu_compact", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_compact_result_t r; return uvm_gpu_compact(g, 0, 0, &r); }},
    ENTRY(uvm_gpu_set_compact_on_oom, 0, 1),
    {"uvm_manager_set_eviction_policy", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_eviction_policy_t p{}; return uvm_manager_set_eviction_policy(g, &p); }},
    ENTRY(uvm_client_create, "child", &g_client),
    ENTRY(uvm_client_destroy, c),
    ENTRY(uvm_client_set_budget, c, 0, 64 * M),
    ENTRY(uvm_client_create_sleepable, "child", &g_client),
    ENTRY(uvm_client_sleep, c, nullptr),
    ENTRY(uvm_client_wake, c),
    ENTRY(uvm_mem_set_sleep_mode, o, UVM_SLEEP_KEEP),
    ENTRY(uvm_client_set_sleep_policy, c, &g_sleep_policy),
    ENTRY(uvm_manager_set_sleep_host_limit, 64 * M),
    {"uvm_client_info", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *c) { uvm_client_info_t i; return uvm_client_info(g, c, &i); }},
    ENTRY(uvm_pressure_watermarks, c, 0, g_marks, 1),
    ENTRY(uvm_pressure_fd, &g_fd),
    {"uvm_pressure_events", [](uvm_manager_t *g, uvm_mem_t *, uvm_stream_t *, uvm_client_t *) { uvm_pressure_event_t e[4]; return uvm_pressure_events(g, e, 4, &g_u32); }},
    ENTRY(uvm_mem_export, o, 0),
    ENTRY(uvm_mem_import, 0, c, &g_mem),
    {"uvm_mem_host_pages", [](uvm_manager_t *g, uvm_mem_t *o, uvm_stream_t *, uvm_client_t *) { uvm_host_pages_t hp; return uvm_mem_host_pages(g, o, &hp); }},
    ENTRY(uvm_sim_stream_hold, s),
    ENTRY(uvm_sim_stream_release, s),
};

#undef ENTRY
#undef ENTRY0

// The public functions whose first parameter is a manager, read from the
// headers (the C declarations: `UVM_API <type> name(uvm_manager_t *mgr`).
std::set<std::string> header_entry_points() {
    std::set<std::string> names;
    for (const char *header : {"uvm.h", "uvm_share.h", "uvm_pressure.h", "uvm_observe.h", "uvm_sim.h"}) {
        std::ifstream in(std::string(UVM_PUBLIC_HEADER_DIR) + "/" + header);
        std::stringstream text;
        text << in.rdbuf();
        const std::regex decl(R"(UVM_API\s+[\w\s\*]+?\b(uvm_\w+)\s*\(\s*uvm_manager_t\s*\*)");
        const std::string s = text.str();
        for (std::sregex_iterator it(s.begin(), s.end(), decl), end; it != end; ++it)
            names.insert((*it)[1].str());
    }
    return names;
}

}  // namespace

// The table is the whole API: a call added to a header without a row fails here.
TEST(Fork, TheEntryPointTableNamesEveryCallThatTakesAManager) {
    const std::set<std::string> declared = header_entry_points();
    ASSERT_GT(declared.size(), 60u) << "the headers were not read from " << UVM_PUBLIC_HEADER_DIR;
    std::set<std::string> tabled;
    for (const EntryPoint &e : kEntryPoints)
        EXPECT_TRUE(tabled.insert(e.name).second) << e.name << " is in the table twice";
    for (const std::string &name : declared)
        EXPECT_TRUE(tabled.count(name)) << name << " is declared but the fork test does not call it";
    for (const std::string &name : tabled)
        EXPECT_TRUE(declared.count(name)) << name << " is in the table but in no header";
}

// Every entry point, in a child, refuses its parent's manager with FORKED
// and touches nothing of it.
TEST(Fork, EveryEntryPointRefusesItsParentsManagerInAChild) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M);
    uvm_mem_t *object = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &object), UVM_OK);
    uvm_stream_t *stream = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &stream), UVM_OK);
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "parent", &client), UVM_OK);
    uvm_gpu_stats_t before;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        // One line per entry point that did not answer FORKED.
        for (const EntryPoint &e : kEntryPoints) {
            const uvm_status_t status = e.call(mgr, object, stream, client);
            if (status != UVM_ERR_FORKED) {
                char line[256];
                const int n = std::snprintf(line, sizeof(line), "%s gave %s\n", e.name, uvm_status_string(status));
                (void)!write(fds[1], line, static_cast<size_t>(n));
            } else if (!std::strstr(uvm_last_error_message(), "fork()ed process")) {
                // Every entry point goes through enter, which says why.
                char line[512];
                const int n = std::snprintf(line, sizeof(line), "%s said \"%s\"\n", e.name, uvm_last_error_message());
                (void)!write(fds[1], line, static_cast<size_t>(std::min(n, static_cast<int>(sizeof(line)) - 1)));
            }
        }
        _exit(0);
    }
    close(fds[1]);
    std::string failures;
    char chunk[512];
    for (ssize_t n; (n = read(fds[0], chunk, sizeof(chunk))) > 0;)
        failures.append(chunk, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(failures, "") << "entry points that did not refuse the parent's manager in the child";
    // The parent's manager, object, stream and client are as they were.
    uvm_gpu_stats_t after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.vidmem_objects, before.vidmem_objects);
    EXPECT_EQ(uvm_stream_synchronize(mgr, stream), UVM_OK);
    uvm_client_info_t ci;
    EXPECT_EQ(uvm_client_info(mgr, client, &ci), UVM_OK);
    EXPECT_EQ(uvm_stream_destroy(mgr, stream), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(mgr, client), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, object), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Fork, AChildIsRefusedItsParentsManagersAndMakesItsOwn) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    uvm_mem_t *object = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &object), UVM_OK);
    uvm_gpu_stats_t before;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
        _exit(child_checks(mgr, object));
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check that failed (see child_checks)";
    // The parent's manager and object are as they were.
    uvm_gpu_stats_t after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.vidmem_objects, before.vidmem_objects);
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(mgr, object, &info), UVM_OK);
    EXPECT_EQ(info.alloc_size, 4 * M);
    uvm_mem_t *more = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &more), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, more), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, object), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

namespace {

// In a child process: the GPU's free memory as the driver says it (through
// a manager of its own on CUDA), written to `fd`; 0 where there is no GPU.
void report_free_memory(int fd) {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_CUDA;
    uvm_manager_t *mgr = nullptr;
    uint64_t free_bytes = 0;
    if (uvm_manager_create(&p, &mgr) == UVM_OK) {
        uvm_gpu_info_t gi;
        if (uvm_gpu_info(mgr, 0, &gi) == UVM_OK)
            free_bytes = gi.memory_free;
        uvm_manager_destroy(mgr);
    }
    (void)!write(fd, &free_bytes, sizeof(free_bytes));
}

// Run `body(fd)` in a child process and read back what it wrote.
template <typename F>
uint64_t in_child(F &&body) {
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        body(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    uint64_t value = 0;
    if (read(fds[0], &value, sizeof(value)) != sizeof(value))
        value = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return value;
}

}  // namespace

// A process killed in the middle of its allocations leaves no GPU memory
// behind: the driver takes back what its handles held. The parent never
// touches the GPU itself; fresh children measure before and after.
TEST(Fork, AProcessKilledMidAllocationLeavesNoGpuMemory) {
    // The driver cannot be used in a child forked after this process loaded
    // it (an earlier test in the same run did): run alone, as ctest does.
    if (void *loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
        dlclose(loaded);
        GTEST_SKIP() << "the CUDA driver is loaded in this process already; run this test alone (ctest does)";
    }
    const uint64_t before = in_child(report_free_memory);
    if (before == 0)
        GTEST_SKIP() << "no CUDA GPU here";
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.backend = UVM_BACKEND_CUDA;
        uvm_manager_t *mgr = nullptr;
        if (uvm_manager_create(&p, &mgr) != UVM_OK)
            _exit(1);
        // 64 MiB objects until killed (at most 8 GiB: far below what the GPU has).
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * M, 0, 0, UVM_MEM_GPU_MAPPED);
        for (int i = 0; i < 128; ++i) {
            uvm_mem_t *m = nullptr;
            if (uvm_mem_alloc(mgr, &a, &m) != UVM_OK)
                break;
            const uint64_t n = static_cast<uint64_t>(i + 1);
            (void)!write(fds[1], &n, sizeof(n));
        }
        pause();  // killed here, or earlier
        _exit(0);
    }
    close(fds[1]);
    uint64_t made = 0;
    while (made < 16 && read(fds[0], &made, sizeof(made)) == sizeof(made)) {
    }
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    close(fds[0]);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_GE(made, 16u) << "the child made fewer objects than the test waits for";
    // The driver may take a moment to tear the dead process's context down.
    uint64_t after = 0;
    for (int attempt = 0; attempt < 50; ++attempt) {
        after = in_child(report_free_memory);
        if (after + 64 * M >= before)
            break;
        usleep(100 * 1000);
    }
    EXPECT_GE(after + 64 * M, before) << "free before " << (before >> 20) << " MiB, after " << (after >> 20)
                                      << " MiB: the killed process's memory is still held";
}
