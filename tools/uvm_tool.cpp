/*
 * uvm-tool - look at what a manager sees (uvm-tool --help; tools/cli.h for
 * the command-line convention).
 *   uvm-tool gpus    the GPUs, their memory, page sizes and peer links
 *   uvm-tool peers   the peer matrix
 *   uvm-tool topo    GPUs, PCI paths, peer access, CPU and NUMA affinity, and the
 *                    host's NUMA nodes, in the spirit of `nvidia-smi topo -m`
 *   uvm-tool stats   a running process's JSON snapshot: its endpoint
 *                    (uvm_metrics_serve; --url) or a file it wrote (--file)
 *   uvm-tool metrics the same in the Prometheus text format
 *   uvm-tool top     a refreshing view per GPU and client of a running
 *                    process's manager (--url) or of a demo workload (--demo); see top.cpp
 * gpus, peers and topo describe the machine through a manager of their own;
 * stats, metrics and top read another process's, as nvidia-smi reads the
 * driver's: a manager made here would hold nothing.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <uvm/uvm.h>

#include "tools/cli.h"
#include "tools/endpoint.h"
#include "tools/top.h"

namespace {

const char *path_name(uvm_gpu_path_t p) {
    switch (p) {
        case UVM_GPU_PATH_SELF: return "X";
        case UVM_GPU_PATH_PIX: return "PIX";
        case UVM_GPU_PATH_PXB: return "PXB";
        case UVM_GPU_PATH_PHB: return "PHB";
        case UVM_GPU_PATH_NODE: return "NODE";
        case UVM_GPU_PATH_SYS: return "SYS";
        default: return "?";
    }
}

void print_topology(uvm_manager_t *mgr, uint32_t count, const uvm_gpu_info_t *info) {
    static const char *thp[] = {"unknown", "never", "madvise", "always"};
    uvm_host_info_t host;
    printf("%-6s", "");
    for (uint32_t g = 0; g < count; ++g)
        printf(" GPU%-7u", g);
    printf(" %-20s %s\n", "CPU Affinity", "NUMA Affinity");
    for (uint32_t g = 0; g < count; ++g) {
        printf("GPU%-3u", g);
        for (uint32_t p = 0; p < count; ++p) {
            uvm_gpu_path_t path = UVM_GPU_PATH_UNKNOWN;
            char cell[16];
            uvm_gpu_path(mgr, g, p, &path);
            snprintf(cell, sizeof cell, "%s%s", path_name(path),
                     p != g && ((info[g].peer_mask >> p) & 1u) ? "+P2P" : "");
            printf(" %-10s", cell);
        }
        printf(" %-20s ", info[g].cpus[0] ? info[g].cpus : "N/A");
        if (info[g].host_numa_id >= 0)
            printf("%d\n", info[g].host_numa_id);
        else
            printf("N/A\n");
    }
    if (uvm_host_info(mgr, &host) != UVM_OK)
        return;
    printf("\nNUMA nodes (%s):\n", host.from_hwloc ? "hwloc" : "no hwloc, or configured");
    for (uint32_t i = 0; i < host.numa_node_count; ++i) {
        uvm_numa_node_info_t n;
        if (uvm_numa_node_info(mgr, i, &n) != UVM_OK)
            continue;
        printf("  node %-3d CPUs %-20s memory %llu MiB, %llu MiB free", n.id, n.cpus,
               (unsigned long long)(n.memory_total >> 20), (unsigned long long)(n.memory_free >> 20));
        if (n.host_node != n.id)
            printf(" (backed by host node %d)", n.host_node);
        printf("\n");
    }
    printf("transparent huge pages: %s (shmem: %s)\n", thp[host.thp], thp[host.shmem_thp]);
    printf("\nLegend:\n"
           "  X    = self\n"
           "  SYS  = through the SMP interconnect between NUMA nodes\n"
           "  NODE = between PCIe host bridges of one NUMA node\n"
           "  PHB  = through a PCIe host bridge\n"
           "  PXB  = through several PCIe bridges, not a host bridge\n"
           "  PIX  = through at most one PCIe switch\n"
           "  +P2P = the GPU can reach the other's memory directly (NVLink or PCIe peer access)\n");
}

// Where stats and metrics read a running process's figures from.
struct Source {
    std::string url = uvm::tool::kDefaultUrl;
    std::string file;
};

void add_source_options(CLI::App *cmd, Source *src, const char *file_what) {
    CLI::Option *url = cmd->add_option("--url", src->url, "The process's endpoint (uvm_metrics_serve)")
                           ->type_name("URL")
                           ->capture_default_str();
    cmd->add_option("--file", src->file, file_what)->type_name("FILE")->excludes(url);
}

// A running process's snapshot (stats) or metrics, checked to be one, on stdout.
int print_source(const Source &src, bool stats) {
    const char *name = stats ? "stats" : "metrics";
    const char *path = stats ? "/snapshot" : "/metrics";
    std::string body, why;
    const bool ok = src.file.empty() ? uvm::tool::fetch_endpoint(src.url, path, &body, &why)
                                     : uvm::tool::read_file(src.file, &body, &why);
    const std::string from = src.file.empty() ? src.url + path : src.file;
    if (!ok) {
        std::fprintf(stderr, "uvm-tool %s: %s\n", name, why.c_str());
        return 1;
    }
    // A snapshot is a JSON object with the GPUs; metrics carry the GPUs' series.
    const bool looks_right = stats ? body.find('{') == body.find_first_not_of(" \t\r\n") &&
                                         body.find("\"gpus\"") != std::string::npos
                                   : body.find("uvm_gpu_") != std::string::npos;
    if (!looks_right) {
        std::fprintf(stderr, "uvm-tool %s: %s is not a uvm manager's %s\n", name, from.c_str(),
                     stats ? "snapshot (uvm_manager_snapshot)" : "metrics (uvm_manager_metrics)");
        return 1;
    }
    std::fputs(body.c_str(), stdout);
    if (!body.empty() && body.back() != '\n')
        std::fputc('\n', stdout);
    return 0;
}

// gpus, peers and topo: the machine, as a manager of this process sees it.
int describe_machine(const std::string &what) {
    uvm_manager_t *mgr;
    uint32_t count;
    uvm_status_t s = uvm_manager_create(NULL, &mgr);
    if (s != UVM_OK) {
        std::fprintf(stderr, "uvm-tool %s: %s\n", what.c_str(), uvm_status_string(s));
        return 1;
    }
    uvm_gpu_count(mgr, &count);
    uvm_gpu_info_t info[UVM_MAX_GPUS];
    for (uint32_t g = 0; g < count; ++g)
        uvm_gpu_info(mgr, g, &info[g]);
    if (what == "gpus") {
        for (uint32_t g = 0; g < count; ++g)
            printf("GPU %u: %s | %llu MiB total, %llu MiB free | pages%s%s%s | granularity %llu KiB | "
                   "host NUMA %d%s%s%s\n",
                   g, info[g].name, (unsigned long long)(info[g].memory_total >> 20),
                   (unsigned long long)(info[g].memory_free >> 20),
                   (info[g].page_sizes & UVM_PAGE_SIZE_4K) ? " 4K" : "",
                   (info[g].page_sizes & UVM_PAGE_SIZE_64K) ? " 64K" : "",
                   (info[g].page_sizes & UVM_PAGE_SIZE_2M) ? " 2M" : "",
                   (unsigned long long)(info[g].granularity >> 10), info[g].host_numa_id,
                   info[g].pci_bus_id[0] ? " | PCI " : "", info[g].pci_bus_id,
                   info[g].cpu_coherent ? " | CPU-coherent" : "");
    } else if (what == "peers") {
        printf("      ");
        for (uint32_t g = 0; g < count; ++g)
            printf(" GPU%-2u", g);
        printf("\n");
        for (uint32_t g = 0; g < count; ++g) {
            printf("GPU%-2u ", g);
            for (uint32_t p = 0; p < count; ++p)
                printf(" %-5s", p == g ? "X" : ((info[g].peer_mask >> p) & 1u) ? "P2P" : "-");
            printf("\n");
        }
    } else {
        print_topology(mgr, count, info);
    }
    return uvm_manager_destroy(mgr) == UVM_OK ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"Look at the GPUs a manager sees, and at a running process's manager.", "uvm-tool"};
    uvm::cli::set_conventions(app);
    app.require_subcommand(0, 1);  // none is refused after parsing, so that a bad flag is named first
    app.footer("gpus, peers and topo describe this machine (UVM_BACKEND=sim|cuda picks the backend); stats, metrics\n"
               "and top read a running process that serves its manager (uvm_metrics_serve; in Python\n"
               "uvm.serve_metrics(mgr, 9400)) or a file it wrote.");
    app.add_subcommand("gpus", "The GPUs: memory, page sizes, granularity, NUMA node, PCI bus");
    app.add_subcommand("peers", "Which GPU reaches which GPU's memory directly");
    app.add_subcommand("topo", "GPUs, PCI paths, peer access, CPU and NUMA affinity, NUMA nodes, huge pages");
    Source stats_source, metrics_source;
    CLI::App *stats = app.add_subcommand("stats", "A running process's JSON snapshot (GPUs, clients, objects)");
    add_source_options(stats, &stats_source, "A snapshot the process wrote (uvm_manager_snapshot's JSON)");
    CLI::App *metrics = app.add_subcommand("metrics", "A running process's metrics, in the Prometheus text format");
    add_source_options(metrics, &metrics_source, "Metrics the process wrote (uvm_manager_metrics' text)");
    uvm::tool::TopOptions top;
    CLI::App *top_cmd = app.add_subcommand("top", "A refreshing view per GPU and client of a running process's "
                                                  "manager, or of a demo workload");
    CLI::Option *url = top_cmd
                           ->add_option("--url", top.url,
                                        "The process's endpoint (uvm_metrics_serve), e.g. " +
                                            std::string(uvm::tool::kDefaultUrl))
                           ->type_name("URL");
    CLI::Option *demo = top_cmd->add_flag("--demo", top.demo, "A workload of three clients on two simulated GPUs, "
                                                              "in this process")
                            ->excludes(url);
    top_cmd->add_option("--serve", top.serve, "With --demo: serve its metrics on this port (0: any free one)")
        ->type_name("PORT")
        ->check(uvm::cli::whole_number(0, 65535))
        ->needs(demo);
    top_cmd->add_option("--interval", top.interval, "Seconds between frames")
        ->type_name("SECONDS")
        ->check(uvm::cli::above_zero())
        ->capture_default_str();
    top_cmd->add_option("--count", top.count, "Frames to draw (0: until interrupted)")
        ->type_name("N")
        ->check(uvm::cli::whole_number())
        ->capture_default_str();
    top_cmd->add_flag("--plain", top.plain, "One frame after another, no screen clearing (logs, tests)");

    const int refused = uvm::cli::parse(app, argc, argv);
    if (refused >= 0)
        return refused;
    if (*stats)
        return print_source(stats_source, true);
    if (*metrics)
        return print_source(metrics_source, false);
    if (app.get_subcommands().empty())
        return uvm::cli::refuse(app, "which? gpus, peers, topo, stats, metrics or top");
    if (*top_cmd) {
        if (top.url.empty() && !top.demo)
            return uvm::cli::refuse(app, "--url or --demo is required");
        return uvm::tool::run_top(top);
    }
    return describe_machine(app.get_subcommands().front()->get_name());
}
