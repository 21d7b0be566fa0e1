// The HTTP /metrics endpoint (uvm_metrics_serve): it serves what
// uvm_manager_metrics says, and a real Prometheus server (Debian package
// prometheus), started here on loopback with a configuration of our own and
// a temporary data folder, scrapes it and answers a query for a known value.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t M = 1024 * 1024;

// The body of GET `path` from 127.0.0.1:port ("" where it fails).
std::string http_get(uint16_t port, const std::string &path) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return "";
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string response;
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0) {
        const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
            char buf[4096];
            ssize_t n;
            while ((n = read(fd, buf, sizeof(buf))) > 0)
                response.append(buf, static_cast<size_t>(n));
        }
    }
    close(fd);
    const size_t body = response.find("\r\n\r\n");
    return body == std::string::npos ? "" : response.substr(body + 4);
}

uint16_t free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    uint16_t port = 0;
    if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

// A small simulated manager serving its metrics on a port the system picks;
// false (nothing left behind) in a build without cpp-httplib.
bool served_manager(uvm_manager_t **mgr, uvm_metrics_server_t **server, uint16_t *port) {
    *mgr = small_sim(1, 64 * M);
    const uvm_status_t s = uvm_metrics_serve(*mgr, "127.0.0.1", 0, server, port);
    if (s == UVM_ERR_NOT_SUPPORTED) {
        EXPECT_EQ(uvm_manager_destroy(*mgr), UVM_OK);
        return false;
    }
    EXPECT_EQ(s, UVM_OK);
    EXPECT_NE(*port, 0);
    return s == UVM_OK;
}

}  // namespace

TEST(MetricsServer, ServesTheMetricsAndAPrometheusServerScrapesThem) {
    uvm_manager_t *mgr = nullptr;
    uvm_metrics_server_t *server = nullptr;
    uint16_t port = 0;
    if (!served_manager(&mgr, &server, &port))
        GTEST_SKIP() << "built without cpp-httplib (libcpp-httplib-dev): uvm_metrics_serve is NOT_SUPPORTED";
    ASSERT_FALSE(HasFailure());
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 6 * M, 0, 0, 0);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    size_t needed = 0;
    ASSERT_EQ(uvm_manager_metrics(mgr, nullptr, 0, &needed), UVM_ERR_BUFFER_TOO_SMALL);
    std::string direct(needed, '\0');
    ASSERT_EQ(uvm_manager_metrics(mgr, &direct[0], needed, &needed), UVM_OK);
    direct.resize(needed - 1);
    EXPECT_EQ(http_get(port, "/metrics"), direct);
    EXPECT_EQ(http_get(port, "/snapshot").front(), '{');

    if (std::system("command -v prometheus >/dev/null 2>&1") != 0) {
        std::printf("prometheus is not installed (Debian package prometheus): no scrape by a real server\n");
    } else {
        char dir[] = "/tmp/uvm-prometheus-XXXXXX";
        ASSERT_NE(mkdtemp(dir), nullptr);
        const std::string config = std::string(dir) + "/prometheus.yml";
        std::ofstream(config) << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: uvm\n"
                              << "    static_configs:\n      - targets: ['127.0.0.1:" << port << "']\n";
        const uint16_t web = free_port();
        const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(web);
        const std::string cfg = "--config.file=" + config, data = std::string("--storage.tsdb.path=") + dir + "/data";
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
                _exit(126);
            execlp("prometheus", "prometheus", cfg.c_str(), data.c_str(), listen.c_str(), nullptr);
            _exit(127);
        }
        // Ask until the scrape has landed: the GPU's total, a known value.
        const std::string query = "/api/v1/query?query=uvm_gpu_memory_total_bytes%7Bgpu%3D%220%22%7D";
        const std::string want = "\"" + std::to_string(64 * M) + "\"]";
        std::string answer;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline) {
            answer = http_get(web, query);
            if (answer.find(want) != std::string::npos)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        kill(pid, SIGTERM);
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_NE(answer.find(want), std::string::npos) << "Prometheus answered: " << answer;
        EXPECT_NE(answer.find("\"job\":\"uvm\""), std::string::npos) << answer;
        EXPECT_EQ(std::system((std::string("rm -rf ") + dir).c_str()), 0);
    }
    ASSERT_EQ(uvm_metrics_stop(mgr, server), UVM_OK);
    EXPECT_EQ(uvm_metrics_stop(mgr, server), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(http_get(port, "/metrics"), "") << "still serving after stop";
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    // A server left running is stopped with its manager.
    ASSERT_EQ(uvm_metrics_serve(mgr, "127.0.0.1", 0, &server, nullptr), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(MetricsServer, EveryBadArgumentIsRefusedAndNothingIsServed) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_metrics_server_t *server = nullptr;
    EXPECT_EQ(uvm_metrics_serve(nullptr, "127.0.0.1", 0, &server, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_metrics_serve(mgr, nullptr, 0, &server, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_metrics_serve(mgr, "127.0.0.1", 0, nullptr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_metrics_stop(mgr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_metrics_stop(mgr, reinterpret_cast<uvm_metrics_server_t *>(uintptr_t(0x40))), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// An address that is not one is the caller's mistake (INVALID_ARGUMENT),
// not a busy address (ADDRESS_IN_USE), and nothing is left listening.
TEST(MetricsServer, AnAddressThatIsNotOneIsInvalidArgument) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_metrics_server_t *server = nullptr;
    const uvm_status_t probe = uvm_metrics_serve(mgr, "127.0.0.1", 0, &server, nullptr);
    if (probe == UVM_ERR_NOT_SUPPORTED) {
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        GTEST_SKIP() << "built without cpp-httplib (libcpp-httplib-dev): uvm_metrics_serve is NOT_SUPPORTED";
    }
    ASSERT_EQ(probe, UVM_OK);
    ASSERT_EQ(uvm_metrics_stop(mgr, server), UVM_OK);
    for (const char *bad : {"not an address", "999.1.1.1", "127.0.0.1.5", "", "::g", "1.2.3.4:80"}) {
        server = nullptr;
        EXPECT_EQ(uvm_metrics_serve(mgr, bad, 0, &server, nullptr), UVM_ERR_INVALID_ARGUMENT) << "'" << bad << "'";
        EXPECT_EQ(server, nullptr);
    }
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

#if defined(UVM_TOOL_PATH)
// uvm-tool with `args`: its exit status, and what it wrote to stdout and stderr.
int run_tool(const std::string &args, std::string *out) {
    FILE *pipe = popen((std::string(UVM_TOOL_PATH) + " " + args + " 2>&1").c_str(), "r");
    if (!pipe)
        return -1;
    char buf[1024];
    size_t n;
    out->clear();
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0)
        out->append(buf, n);
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#endif

// uvm-tool stats and metrics read a running process's manager through its
// endpoint, not a manager of their own: the figures are the process's.
TEST(MetricsServer, ToolStatsAndMetricsReadTheRunningProcess) {
#if !defined(UVM_TOOL_PATH)
    GTEST_SKIP() << "uvm-tool is not in this build (it needs CLI11)";
#else
    uvm_manager_t *mgr = nullptr;
    uvm_metrics_server_t *server = nullptr;
    uint16_t port = 0;
    if (!served_manager(&mgr, &server, &port))
        GTEST_SKIP() << "built without cpp-httplib (libcpp-httplib-dev): no endpoint to read";
    ASSERT_FALSE(HasFailure());
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "toolreader", &c), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 6 * M);
    p.client = c;
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    std::string out;
    ASSERT_EQ(run_tool("stats --url " + url, &out), 0) << out;
    // The process's snapshot: its client, and its object among the GPU's.
    EXPECT_EQ(out.rfind("{", 0), 0u) << out;
    EXPECT_NE(out.find("\"name\":\"toolreader\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"objects\":1,"), std::string::npos) << out;
    ASSERT_EQ(run_tool("metrics --url " + url, &out), 0) << out;
    EXPECT_NE(out.find("uvm_client_vidmem_bytes{client=\"toolreader\",gpu=\"0\",state=\"pinned\"} 6291456"),
              std::string::npos)
        << out;
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    ASSERT_EQ(uvm_metrics_stop(mgr, server), UVM_OK);
    // Nothing serves there now: said, with what to do, and exit status 1.
    EXPECT_EQ(run_tool("stats --url " + url, &out), 1) << out;
    EXPECT_NE(out.find("uvm-tool stats: nothing answers at " + url), std::string::npos) << out;
    EXPECT_NE(out.find("uvm_metrics_serve"), std::string::npos) << out;
    EXPECT_EQ(run_tool("metrics --url " + url, &out), 1) << out;
    EXPECT_NE(out.find("uvm-tool metrics: nothing answers at " + url), std::string::npos) << out;
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
#endif
}

// A snapshot or metrics a process wrote to a file: printed as written;
// anything else is named for what it is not.
TEST(MetricsServer, ToolStatsAndMetricsReadFilesAProcessWrote) {
#if !defined(UVM_TOOL_PATH)
    GTEST_SKIP() << "uvm-tool is not in this build (it needs CLI11)";
#else
    uvm_manager_t *mgr = nullptr;
    uvm_manager_params_t params{};
    params.backend = UVM_BACKEND_SIM;
    params.sim.gpu_count = 1;
    params.sim.vidmem_size = 64 * M;
    ASSERT_EQ(uvm_manager_create(&params, &mgr), UVM_OK);
    uvm_mem_t *m = nullptr;
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    p.tag = "written";
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    char dir[] = "/tmp/uvm-tool-files-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string snap_path = std::string(dir) + "/snapshot.json", metrics_path = std::string(dir) + "/metrics";
    // As a process writes them, each ending in a newline (the tool ends what it prints with one).
    const std::string snap = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr, b, n, need); }) + "\n";
    std::string metrics = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr, b, n, need); });
    if (metrics.back() != '\n')
        metrics += "\n";
    std::ofstream(snap_path) << snap;
    std::ofstream(metrics_path) << metrics;
    std::string out;
    ASSERT_EQ(run_tool("stats --file " + snap_path, &out), 0) << out;
    EXPECT_EQ(out, snap);
    ASSERT_EQ(run_tool("metrics --file " + metrics_path, &out), 0) << out;
    EXPECT_EQ(out, metrics);
    // Each file for what it is: metrics are not a snapshot, nor a snapshot metrics.
    EXPECT_EQ(run_tool("stats --file " + metrics_path, &out), 1) << out;
    EXPECT_NE(out.find("is not a uvm manager's snapshot"), std::string::npos) << out;
    EXPECT_EQ(run_tool("metrics --file " + snap_path, &out), 1) << out;
    EXPECT_NE(out.find("is not a uvm manager's metrics"), std::string::npos) << out;
    EXPECT_EQ(run_tool("stats --file " + std::string(dir) + "/none", &out), 1) << out;
    EXPECT_NE(out.find("cannot read " + std::string(dir) + "/none: No such file"), std::string::npos) << out;
    // --url and --file together are refused as any bad flag is.
    EXPECT_EQ(run_tool("stats --file " + snap_path + " --url http://127.0.0.1:1", &out), 2) << out;
    std::remove(snap_path.c_str());
    std::remove(metrics_path.c_str());
    rmdir(dir);
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
#endif
}

// uvm-tool top, pointed at a runtime's endpoint, shows its clients: the
// frame is drawn from the /snapshot the server gives.
TEST(MetricsServer, TopShowsTheClientsOfARuntimeOverHttp) {
#if !defined(UVM_TOOL_PATH) || !defined(UVM_HAVE_NLOHMANN_JSON)
    GTEST_SKIP() << "uvm-tool top is not in this build (it needs nlohmann-json)";
#else
    uvm_manager_t *mgr = nullptr;
    uvm_metrics_server_t *server = nullptr;
    uint16_t port = 0;
    if (!served_manager(&mgr, &server, &port))
        GTEST_SKIP() << "built without cpp-httplib (libcpp-httplib-dev): no endpoint for top to read";
    ASSERT_FALSE(HasFailure());
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "webapp", &c), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(mgr, c, 0, 32 * M), UVM_OK);
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 8 * M);
    p.client = c;
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    const std::string cmd = std::string(UVM_TOOL_PATH) + " top --url http://127.0.0.1:" + std::to_string(port) +
                            " --count 1 --plain 2>&1";
    FILE *pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[1024];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0)
        out.append(buf, n);
    EXPECT_EQ(pclose(pipe), 0) << out;
    EXPECT_NE(out.find("webapp"), std::string::npos) << out;
    EXPECT_NE(out.find("8.00 MiB / 32.00 MiB"), std::string::npos) << out;  // used / budget
    EXPECT_NE(out.find("25%"), std::string::npos) << out;
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr, c), UVM_OK);
    ASSERT_EQ(uvm_metrics_stop(mgr, server), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
#endif
}
