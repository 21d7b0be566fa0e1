#include "observe/report.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "common/json_writer.h"
#include "common/sizes.h"
#include "compact/compact.h"
#include "observe/stats.h"
#include "observe/trace.h"
#include "pressure/client.h"
#include "pressure/fits.h"
#include "uvm/mem.h"
#include "stream/stream.h"

namespace uvm {

namespace {

const char *const kChunkNames[UVM_CHUNK_SIZE_COUNT] = {"4K", "64K", "2M"};

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string &v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"')
            out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

struct GpuView {
    uvm_gpu_info_t info;
    uvm_gpu_stats_t stats;
    uint64_t held = 0;        // what the driver counts as held for the GPU
    uint64_t free_held = 0;   // free chunks among them
    uint64_t pinned = 0;
    uint64_t evictable = 0;
};

GpuView gpu_view(Manager &mgr, uint32_t g) {
    GpuView v;
    std::memset(&v.info, 0, sizeof(v.info));
    std::memset(&v.stats, 0, sizeof(v.stats));
    gpu_info(mgr, g, &v.info);
    gpu_stats(mgr, g, &v.stats);
    v.held = v.stats.held_bytes;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        v.free_held += v.stats.bytes_free[i];
        v.pinned += v.stats.bytes_pinned[i];
        v.evictable += v.stats.bytes_evictable[i];
    }
    return v;
}

// Where a GPU's held memory is (uvm_gpu_stats_t's held_* parts), by name.
struct HeldPart {
    const char *name;
    uint64_t bytes;
};
std::array<HeldPart, 7> held_parts(const uvm_gpu_stats_t &s) {
    return {{{"live", s.held_live_bytes},
             {"cached", s.held_cached_bytes},
             {"pooled", s.held_pooled_bytes},
             {"retiring", s.held_retiring_bytes},
             {"private", s.held_private_bytes},
             {"unused", s.held_unused_bytes},
             {"other", s.held_other_bytes}}};
}

void held_json(Json &j, const uvm_gpu_stats_t &s) {
    j.open("held_parts", '{');
    for (const HeldPart &p : held_parts(s))
        j.num(p.name, p.bytes);
    j.close('}');
}

std::string held_text(const uvm_gpu_stats_t &s) {
    std::string t = "  held " + size_text(s.held_bytes) + ":";
    const char *sep = " ";
    for (const HeldPart &p : held_parts(s)) {
        t += sep + size_text(p.bytes) + " " + p.name;
        sep = ", ";
    }
    return t + "\n";
}

// The largest live objects, largest first (fields that never change after
// allocation: no object lock needed).
std::vector<std::shared_ptr<Mem>> largest_objects(Manager &mgr, size_t count) {
    std::vector<std::shared_ptr<Mem>> all = mgr.live_objects();
    const size_t n = std::min(count, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                      [](const auto &a, const auto &b) { return a->alloc_size > b->alloc_size; });
    all.resize(n);
    return all;
}

struct OomReport {
    uint64_t manager = 0;  // Manager::serial; 0: none
    std::string text;
    std::string json;
};
thread_local OomReport t_oom;

}  // namespace

void note_oom(Manager &mgr, const OomRequest &r) {
    try {
        const uint32_t g = r.gpu < mgr.gpu_count() ? r.gpu : 0;
        mgr.gpu(g).oom_count++;
        if (mgr.tracing.on()) {
            TraceRecord t;
            t.kind = TraceKind::Oom;
            t.bytes = r.size;
            t.backing = r.backing;
            t.gpu = g;
            t.gpu_held = mgr.gpu(g).held_bytes.load(std::memory_order_relaxed);
            mgr.tracer().record(t);
        }
        const GpuView v = gpu_view(mgr, g);
        const std::shared_ptr<Client> client = r.client ? mgr.clients().lookup(r.client) : nullptr;
        const Fits fits = largest_fits(mgr, g, client.get(), r.holding[0], r.holding[1]);
        const std::string client_name = client ? client->name : "default";
        const uint64_t client_budget = client ? client->vidmem[g].budget.load() : 0;
        const auto big = largest_objects(mgr, 5);
        const uint64_t frag_pct = v.free_held ? 100 - 100 * v.stats.largest_free_block / v.free_held : 0;
        // What the ladder's compaction step found (compact.h), for vidmem.
        const std::string compaction = compact_take_oom_note();

        Json j;
        j.open(nullptr, '{');
        j.open("request", '{').str("call", r.call).num("size", r.size).str("backing", backing_text(r.backing))
            .num("gpu", g).num("chunk_size", r.chunk_size).num("flags", r.flags).close('}');
        j.open("gpu", '{').num("index", g).str("name", v.info.name).num("memory_total", v.info.memory_total)
            .num("memory_free", v.info.memory_free).num("driver_free", v.stats.driver_free_bytes)
            .num("held", v.held).num("held_free", v.free_held)
            .num("largest_free_block", v.stats.largest_free_block).num("fragmentation_percent", frag_pct)
            .num("evicted_objects", v.stats.evicted_objects).num("evicted_bytes", v.stats.evicted_bytes)
            .num("largest_request_that_fits", fits.gpu_now);
        if (!compaction.empty())
            j.str("compaction", compaction.c_str());
        held_json(j, v.stats);
        j.close('}');
        j.open("fits", '{').num("chunk_size", kRootChunkSize).boolean("eviction", !mgr.eviction_disabled.load());
        j.open("gpu", '{').num("now", fits.gpu_now).num("with_eviction", fits.gpu_with_eviction).close('}');
        j.open("client", '{').str("name", client_name).num("budget", client_budget).num("now", fits.client_now)
            .num("with_eviction", fits.client_with_eviction).close('}');
        j.close('}');
        // Named clients from their accounts; the default client is the rest.
        uint64_t named_pinned = 0, named_evictable = 0;
        j.open("clients", '[');
        std::string client_lines;
        for (const auto &c : mgr.clients().all()) {
            const uint64_t used = c->vidmem[g].used.load(), evictable = c->vidmem[g].evictable.load();
            const uint64_t budget = c->vidmem[g].budget.load();
            const uint64_t cached = std::min(client_parked_bytes(mgr, *c, g), used - evictable);
            const uint64_t pinned = used - evictable - cached;  // parked objects' chunks are the caches' (free)
            named_pinned += pinned;
            named_evictable += evictable;
            j.open(nullptr, '{').str("name", c->name).num("pinned", pinned).num("evictable", evictable)
                .num("cached", cached).num("budget", budget).close('}');
            client_lines += "client " + c->name + ": " + size_text(pinned) + " pinned, " + size_text(evictable) +
                            " evictable, " + size_text(cached) + " cached for it, budget " +
                            (budget ? size_text(budget) : "none") + "\n";
        }
        const uint64_t default_pinned = v.pinned > named_pinned ? v.pinned - named_pinned : 0;
        const uint64_t default_evictable = v.evictable > named_evictable ? v.evictable - named_evictable : 0;
        j.open(nullptr, '{').str("name", "default").num("pinned", default_pinned).num("evictable", default_evictable)
            .num("budget", 0).close('}').close(']');
        j.open("largest_objects", '[');
        for (const auto &m : big)
            j.open(nullptr, '{').num("size", m->size).num("alloc_size", m->alloc_size)
                .str("backing", backing_text(m->backing)).num("gpu", m->owner).boolean("evictable", m->evictable)
                .close('}');
        j.close(']');
        j.close('}');

        std::string t;
        char line[256];
        std::snprintf(line, sizeof(line), "out of memory: %s of %s (%s, GPU %u, flags 0x%x)\n", r.call,
                      size_text(r.size).c_str(), backing_text(r.backing), g, r.flags);
        t += line;
        std::snprintf(line, sizeof(line), "GPU %u (%s): %s total, %s free in the driver, %s held by the manager\n",
                      g, v.info.name, size_text(v.info.memory_total).c_str(),
                      size_text(v.stats.driver_free_bytes).c_str(), size_text(v.held).c_str());
        t += line;
        t += held_text(v.stats);
        std::snprintf(line, sizeof(line), "  largest free block %s (fragmentation %" PRIu64 "%%)\n",
                      size_text(v.stats.largest_free_block).c_str(), frag_pct);
        t += line;
        if (!compaction.empty())
            t += "  " + compaction + "\n";
        std::snprintf(line, sizeof(line), "  the largest request that would fit (vidmem of 2M chunks): GPU %u %s now, %s with eviction%s\n",
                      g, size_text(fits.gpu_now).c_str(), size_text(fits.gpu_with_eviction).c_str(),
                      mgr.eviction_disabled.load() ? " (eviction is off)" : "");
        t += line;
        std::snprintf(line, sizeof(line), "    in client %s (budget %s): %s now, %s with eviction\n", client_name.c_str(),
                      client_budget ? size_text(client_budget).c_str() : "none", size_text(fits.client_now).c_str(),
                      size_text(fits.client_with_eviction).c_str());
        t += line;
        std::snprintf(line, sizeof(line), "  evicted to host: %" PRIu64 " objects, %s\n", v.stats.evicted_objects,
                      size_text(v.stats.evicted_bytes).c_str());
        t += line;
        t += client_lines;
        std::snprintf(line, sizeof(line), "client default: %s pinned, %s evictable\n", size_text(default_pinned).c_str(),
                      size_text(default_evictable).c_str());
        t += line;
        t += "largest objects:\n";
        for (const auto &m : big) {
            std::snprintf(line, sizeof(line), "  %s %s on GPU %u%s\n", size_text(m->alloc_size).c_str(),
                          backing_text(m->backing), m->owner, m->evictable ? ", evictable" : "");
            t += line;
        }
        t_oom.manager = mgr.serial();
        t_oom.text = std::move(t);
        t_oom.json = j.take();
    } catch (const std::bad_alloc &) {
        t_oom = OomReport();  // no report rather than a wrong one
    }
}

bool last_oom_report(const Manager &mgr, bool json, std::string *out) {
    if (t_oom.manager != mgr.serial())
        return false;
    *out = json ? t_oom.json : t_oom.text;
    return true;
}

const char *backing_text(uvm_backing_t b) {
    return b == UVM_BACKING_VIDMEM ? "vidmem" : b == UVM_BACKING_SYSMEM ? "sysmem" : "managed";
}

std::string objects_report(const std::vector<std::shared_ptr<Mem>> &objects, bool json, const char *what) {
    struct Row {
        const Mem *mem;
        bool evicted;
    };
    std::vector<Row> rows;
    rows.reserve(objects.size());
    for (const auto &m : objects) {
        std::lock_guard<uvm::Mutex> guard(m->lock);
        if (!m->dead)
            rows.push_back({m.get(), m->evicted});
    }
    std::sort(rows.begin(), rows.end(), [](const Row &a, const Row &b) {
        return a.mem->alloc_size != b.mem->alloc_size ? a.mem->alloc_size > b.mem->alloc_size
                                                      : a.mem->born_ns < b.mem->born_ns;
    });
    const uint64_t now = coarse_now_ns();
    auto age_ms = [&](const Mem &m) { return now > m.born_ns ? (now - m.born_ns) / 1000000 : 0; };
    auto client_of = [](const Mem &m) { return m.client ? m.client->name : std::string("default"); };
    // Totals by client and tag: a leak is usually many objects of one kind.
    struct Total {
        uint64_t objects = 0, bytes = 0;
    };
    std::vector<std::pair<std::pair<std::string, std::string>, Total>> totals;
    for (const Row &r : rows) {
        const auto key = std::make_pair(client_of(*r.mem), std::string(r.mem->tag ? r.mem->tag : ""));
        auto it = std::find_if(totals.begin(), totals.end(), [&](const auto &t) { return t.first == key; });
        if (it == totals.end()) {
            totals.push_back({key, Total()});
            it = totals.end() - 1;
        }
        it->second.objects++;
        it->second.bytes += r.mem->alloc_size;
    }
    std::sort(totals.begin(), totals.end(), [](const auto &a, const auto &b) { return a.second.bytes > b.second.bytes; });
    uint64_t all_bytes = 0;
    for (const Row &r : rows)
        all_bytes += r.mem->alloc_size;

    if (json) {
        Json j;
        j.open(nullptr, '{').str("report", what).num("object_count", rows.size()).num("bytes", all_bytes);
        j.open("totals", '[');
        for (const auto &t : totals)
            j.open(nullptr, '{').str("client", t.first.first).str("tag", t.first.second).num("objects", t.second.objects)
                .num("bytes", t.second.bytes).close('}');
        j.close(']');
        j.open("objects", '[');
        for (const Row &r : rows) {
            const Mem &m = *r.mem;
            j.open(nullptr, '{').str("client", client_of(m)).str("tag", m.tag ? m.tag : "").num("size", m.size)
                .num("alloc_size", m.alloc_size).str("backing", backing_text(m.backing)).num("gpu", m.owner)
                .num("chunk_size", m.chunk_size).num("age_ms", age_ms(m)).boolean("evictable", m.evictable)
                .boolean("evicted", r.evicted).close('}');
        }
        j.close(']').close('}');
        return j.take();
    }
    std::string t;
    char line[320];
    std::snprintf(line, sizeof(line), "%s: %zu objects, %s\n", what, rows.size(), size_text(all_bytes).c_str());
    t += line;
    if (!totals.empty())
        t += "by client and tag:\n";
    for (const auto &tot : totals) {
        std::snprintf(line, sizeof(line), "  %-16s %-20s %6" PRIu64 " objects  %s\n", tot.first.first.c_str(),
                      tot.first.second.empty() ? "(no tag)" : tot.first.second.c_str(), tot.second.objects,
                      size_text(tot.second.bytes).c_str());
        t += line;
    }
    constexpr size_t kListed = 50;
    if (!rows.empty())
        t += "largest:\n";
    for (size_t i = 0; i < rows.size() && i < kListed; ++i) {
        const Mem &m = *rows[i].mem;
        std::snprintf(line, sizeof(line), "  %10s  %s, %" PRIu64 " bytes, GPU %u, client %s, tag %s, age %" PRIu64 " ms%s\n",
                      size_text(m.alloc_size).c_str(), backing_text(m.backing), m.size, m.owner,
                      client_of(m).c_str(), m.tag ? m.tag : "-", age_ms(m), rows[i].evicted ? ", evicted" : "");
        t += line;
    }
    if (rows.size() > kListed) {
        std::snprintf(line, sizeof(line), "  ... and %zu more\n", rows.size() - kListed);
        t += line;
    }
    return t;
}

std::string snapshot_json(Manager &mgr) {
    uvm_manager_stats_t ms;
    std::memset(&ms, 0, sizeof(ms));
    manager_stats(mgr, &ms);
    Json j;
    j.open(nullptr, '{');
    j.open("manager", '{').num("objects", ms.objects).num("sysmem_objects", ms.sysmem_objects)
        .num("sysmem_bytes", ms.sysmem_bytes).num("managed_objects", ms.managed_objects)
        .num("managed_bytes", ms.managed_bytes).num("cpu_kernel_mappings", ms.cpu_kernel_mappings)
        .num("cpu_user_mappings", ms.cpu_user_mappings).num("streams", ms.streams)
        .num("retiring_objects", ms.retiring_objects).num("retiring_bytes", ms.retiring_bytes)
        .num("stream_pool_bytes", ms.stream_pool_bytes).num("sleep_host_bytes", ms.sleep_host_bytes)
        .num("sleep_host_limit", ms.sleep_host_limit).close('}');
    // Each GPU's view once (it asks the driver for its free memory), and
    // what fits on it (the default client's figures: pressure/fits.h).
    std::vector<GpuView> views;
    std::vector<Fits> fits;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        views.push_back(gpu_view(mgr, g));
        fits.push_back(largest_fits(mgr, g, nullptr, nullptr, nullptr));
    }
    j.open("gpus", '[');
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        const GpuView &v = views[g];
        const uvm_gpu_stats_t &s = v.stats;
        j.open(nullptr, '{').num("index", g).str("name", v.info.name).num("memory_total", v.info.memory_total)
            .num("memory_free", v.info.memory_free).num("held", v.held).num("largest_free_block", s.largest_free_block)
            .num("oom_total", mgr.gpu(g).oom_count.load()).num("driver_free", s.driver_free_bytes)
            .num("root_chunks_grown", s.root_chunks_grown).num("root_chunks_moved", s.root_chunks_moved)
            .num("compactions", s.compactions).num("compact_bytes_moved", s.compact_bytes_moved)
            .num("compact_bytes_released", s.compact_bytes_released)
            .num("compact_bytes_rebacked", s.compact_bytes_rebacked);
        held_json(j, s);
        j.open("fits", '{').num("chunk_size", kRootChunkSize).num("now", fits[g].gpu_now)
            .num("with_eviction", fits[g].gpu_with_eviction).close('}');
        j.open("chunks", '{');
        for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i)
            j.open(kChunkNames[i], '{').num("free", s.bytes_free[i]).num("pinned", s.bytes_pinned[i])
                .num("evictable", s.bytes_evictable[i]).num("split", s.chunks_split[i]).close('}');
        j.close('}');
        j.open("mappings", '{').num("phys", s.phys_mappings).num("kernel", s.kernel_mappings)
            .num("user", s.user_mappings).num("peer", s.peer_mappings).num("page_table_bytes", s.page_table_bytes)
            .close('}');
        j.open("eviction", '{').num("evictions", s.evictions).num("restores", s.restores)
            .num("bytes_evicted", s.bytes_evicted).num("bytes_restored", s.bytes_restored)
            .num("evicted_objects", s.evicted_objects).num("evicted_bytes", s.evicted_bytes).close('}');
        j.open("copy_engine", '{').num("operations", s.ce_operations).num("bytes", s.ce_bytes).close('}');
        j.num("vidmem_objects", s.vidmem_objects);
        j.close('}');
    }
    j.close(']');
    // Clients, and the default client as what the GPUs' chunks hold beyond
    // the named clients' accounts.
    std::vector<uint64_t> named(mgr.gpu_count(), 0);
    j.open("clients", '[');
    for (const auto &c : mgr.clients().all()) {
        const ClientParked parked = client_parked(mgr, *c);
        j.open(nullptr, '{').str("name", c->name).num("objects", parked.live_objects)
            .num("sysmem_used", c->sysmem.used.load()).num("sysmem_budget", c->sysmem.budget.load());
        j.open("gpus", '[');
        for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
            const uint64_t used = c->vidmem[g].used.load();
            named[g] += used - std::min(used, parked.cached[g]);  // parked chunks are the caches' (free), not live
            j.open(nullptr, '{').num("gpu", g).num("used", used).num("cached", parked.cached[g])
                .num("evictable", c->vidmem[g].evictable.load()).num("budget", c->vidmem[g].budget.load())
                .num("asleep", c->sleep ? c->sleep->asleep_bytes[g].load() : 0).close('}');
        }
        j.close(']').boolean("sleepable", c->sleep != nullptr).boolean("asleep", c->sleep && c->sleep->asleep.load());
        if (c->sleep)
            j.open("sleep_host", '{').num("held", c->sleep->backup.held()).num("kept", c->sleep->host_bytes.load())
                .num("reserve", c->sleep->host_reserve.load())
                .str("policy", c->sleep->host_policy.load() == UVM_SLEEP_HOST_RELEASE ? "release" : "keep")
                .close('}');
        j.close('}');
    }
    j.open(nullptr, '{').str("name", "default").boolean("default", true);
    j.open("gpus", '[');
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        const uint64_t used = views[g].pinned + views[g].evictable;
        j.open(nullptr, '{').num("gpu", g).num("used", used > named[g] ? used - named[g] : 0).num("budget", 0).close('}');
    }
    j.close(']').close('}');
    j.close(']');
    // Objects by backing, in power-of-two classes of their allocated size.
    constexpr int kClasses = 48;
    uint64_t count[3][kClasses] = {}, bytes[3][kClasses] = {};
    for (const auto &m : mgr.live_objects()) {
        int c = 0;
        while (c + 1 < kClasses && (1ull << c) < m->alloc_size)
            ++c;
        const int b = static_cast<int>(m->backing);
        count[b][c]++;
        bytes[b][c] += m->alloc_size;
    }
    j.open("objects", '{');
    for (int b = 0; b < 3; ++b) {
        j.open(backing_text(static_cast<uvm_backing_t>(b)), '[');
        for (int c = 0; c < kClasses; ++c)
            if (count[b][c])
                j.open(nullptr, '{').num("le", 1ull << c).num("count", count[b][c]).num("bytes", bytes[b][c]).close('}');
        j.close(']');
    }
    j.close('}');
    j.close('}');
    return j.take();
}

std::string metrics_text(Manager &mgr) {
    uvm_manager_stats_t ms;
    std::memset(&ms, 0, sizeof(ms));
    manager_stats(mgr, &ms);
    std::vector<GpuView> gpus;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
        gpus.push_back(gpu_view(mgr, g));
    std::string out;
    char line[256];
    auto family = [&](const char *name, const char *type, const char *help) {
        std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        out += line;
    };
    auto sample = [&](const char *name, const std::string &labels, uint64_t value) {
        std::snprintf(line, sizeof(line), "%s%s%s%s %" PRIu64 "\n", name, labels.empty() ? "" : "{", labels.c_str(),
                      labels.empty() ? "" : "}", value);
        out += line;
    };
    auto per_gpu = [&](const char *name, const char *type, const char *help, uint64_t (*get)(const GpuView &)) {
        family(name, type, help);
        for (uint32_t g = 0; g < gpus.size(); ++g)
            sample(name, "gpu=\"" + std::to_string(g) + "\"", get(gpus[g]));
    };
    per_gpu("uvm_gpu_memory_total_bytes", "gauge", "Memory of the GPU.",
            [](const GpuView &v) { return v.info.memory_total; });
    per_gpu("uvm_gpu_memory_free_bytes", "gauge", "Memory the driver can still give.",
            [](const GpuView &v) { return v.info.memory_free; });
    per_gpu("uvm_gpu_held_bytes", "gauge", "GPU memory the manager holds from the driver.",
            [](const GpuView &v) { return v.held; });
    family("uvm_gpu_held_part_bytes", "gauge", "Held GPU memory by where it is (the parts add up to uvm_gpu_held_bytes).");
    for (uint32_t g = 0; g < gpus.size(); ++g)
        for (const HeldPart &p : held_parts(gpus[g].stats))
            sample("uvm_gpu_held_part_bytes", "gpu=\"" + std::to_string(g) + "\",part=\"" + p.name + "\"", p.bytes);
    per_gpu("uvm_gpu_largest_free_block_bytes", "gauge", "Largest contiguous free block among held chunks.",
            [](const GpuView &v) { return v.stats.largest_free_block; });
    family("uvm_gpu_chunk_bytes", "gauge", "Held chunk memory by chunk size and state.");
    for (uint32_t g = 0; g < gpus.size(); ++g)
        for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
            const std::string base = "gpu=\"" + std::to_string(g) + "\",chunk_size=\"" + kChunkNames[i] + "\",state=\"";
            sample("uvm_gpu_chunk_bytes", base + "free\"", gpus[g].stats.bytes_free[i]);
            sample("uvm_gpu_chunk_bytes", base + "pinned\"", gpus[g].stats.bytes_pinned[i]);
            sample("uvm_gpu_chunk_bytes", base + "evictable\"", gpus[g].stats.bytes_evictable[i]);
        }
    per_gpu("uvm_gpu_objects", "gauge", "Vidmem objects owned by the GPU.",
            [](const GpuView &v) { return v.stats.vidmem_objects; });
    family("uvm_gpu_mappings", "gauge", "Objects mapped on the GPU, by kind of mapping.");
    for (uint32_t g = 0; g < gpus.size(); ++g) {
        const std::string base = "gpu=\"" + std::to_string(g) + "\",kind=\"";
        sample("uvm_gpu_mappings", base + "phys\"", gpus[g].stats.phys_mappings);
        sample("uvm_gpu_mappings", base + "kernel\"", gpus[g].stats.kernel_mappings);
        sample("uvm_gpu_mappings", base + "user\"", gpus[g].stats.user_mappings);
        sample("uvm_gpu_mappings", base + "peer\"", gpus[g].stats.peer_mappings);
    }
    per_gpu("uvm_gpu_page_table_bytes", "gauge", "Memory of the GPU's page tables.",
            [](const GpuView &v) { return v.stats.page_table_bytes; });
    per_gpu("uvm_gpu_copy_operations_total", "counter", "Copy-engine operations run.",
            [](const GpuView &v) { return v.stats.ce_operations; });
    per_gpu("uvm_gpu_copy_bytes_total", "counter", "Bytes written by the copy engine.",
            [](const GpuView &v) { return v.stats.ce_bytes; });
    per_gpu("uvm_gpu_evictions_total", "counter", "Objects evicted to host memory.",
            [](const GpuView &v) { return v.stats.evictions; });
    per_gpu("uvm_gpu_restores_total", "counter", "Evicted objects brought back.",
            [](const GpuView &v) { return v.stats.restores; });
    per_gpu("uvm_gpu_evicted_bytes_total", "counter", "Bytes copied out on eviction.",
            [](const GpuView &v) { return v.stats.bytes_evicted; });
    per_gpu("uvm_gpu_restored_bytes_total", "counter", "Bytes copied back on restore.",
            [](const GpuView &v) { return v.stats.bytes_restored; });
    per_gpu("uvm_gpu_root_chunks_grown_total", "counter", "2 MiB root chunks taken from the driver.",
            [](const GpuView &v) { return v.stats.root_chunks_grown; });
    per_gpu("uvm_gpu_root_chunks_moved_total", "counter",
            "Free root chunks given back to grow elsewhere, where no free run could hold an object.",
            [](const GpuView &v) { return v.stats.root_chunks_moved; });
    per_gpu("uvm_gpu_compactions_total", "counter", "Compactions run (uvm_gpu_compact, and before an OOM).",
            [](const GpuView &v) { return v.stats.compactions; });
    per_gpu("uvm_gpu_compact_moved_bytes_total", "counter", "Bytes of live objects moved by compactions.",
            [](const GpuView &v) { return v.stats.compact_bytes_moved; });
    per_gpu("uvm_gpu_compact_released_bytes_total", "counter", "Bytes compactions gave back to the driver.",
            [](const GpuView &v) { return v.stats.compact_bytes_released; });
    per_gpu("uvm_gpu_compact_rebacked_bytes_total", "counter",
            "Live root chunks compactions copied to shrink driver allocations around them.",
            [](const GpuView &v) { return v.stats.compact_bytes_rebacked; });
    per_gpu("uvm_gpu_evicted_objects", "gauge", "Objects of the GPU evicted now.",
            [](const GpuView &v) { return v.stats.evicted_objects; });
    per_gpu("uvm_gpu_evicted_host_bytes", "gauge", "Host memory evicted objects hold.",
            [](const GpuView &v) { return v.stats.evicted_bytes; });
    family("uvm_gpu_oom_total", "counter", "Requests that ended in OUT_OF_MEMORY.");
    for (uint32_t g = 0; g < gpus.size(); ++g)
        sample("uvm_gpu_oom_total", "gpu=\"" + std::to_string(g) + "\"", mgr.gpu(g).oom_count.load());
    const auto clients = mgr.clients().all();
    family("uvm_client_vidmem_bytes", "gauge",
           "Vidmem and managed memory charged to a client, by GPU and state (cached: freed objects kept for its next allocations).");
    for (const auto &c : clients)
        for (uint32_t g = 0; g < gpus.size(); ++g) {
            const std::string base = "client=\"" + label_value(c->name) + "\",gpu=\"" + std::to_string(g) + "\",state=\"";
            const uint64_t used = c->vidmem[g].used.load(), evictable = c->vidmem[g].evictable.load();
            const uint64_t cached = std::min(client_parked_bytes(mgr, *c, g), used - evictable);
            sample("uvm_client_vidmem_bytes", base + "pinned\"", used - evictable - cached);
            sample("uvm_client_vidmem_bytes", base + "evictable\"", evictable);
            sample("uvm_client_vidmem_bytes", base + "cached\"", cached);
        }
    family("uvm_client_vidmem_budget_bytes", "gauge", "A client's vidmem budget on a GPU (0: none).");
    for (const auto &c : clients)
        for (uint32_t g = 0; g < gpus.size(); ++g)
            sample("uvm_client_vidmem_budget_bytes", "client=\"" + label_value(c->name) + "\",gpu=\"" + std::to_string(g) + "\"",
                   c->vidmem[g].budget.load());
    family("uvm_client_asleep_bytes", "gauge",
           "Vidmem a sleeping client gave back to the driver and takes again at its wake, by GPU.");
    for (const auto &c : clients)
        if (c->sleep)
            for (uint32_t g = 0; g < gpus.size(); ++g)
                sample("uvm_client_asleep_bytes", "client=\"" + label_value(c->name) + "\",gpu=\"" + std::to_string(g) + "\"",
                       c->sleep->asleep_bytes[g].load());
    family("uvm_client_sleep_host_bytes", "gauge",
           "Pinned host memory of a sleepable client's backup, by state (kept: its sleep's bytes; ready: the rest, "
           "held for its next sleep).");
    for (const auto &c : clients)
        if (c->sleep) {
            const uint64_t held = c->sleep->backup.held(), kept = std::min(c->sleep->host_bytes.load(), held);
            const std::string base = "client=\"" + label_value(c->name) + "\",state=\"";
            sample("uvm_client_sleep_host_bytes", base + "kept\"", kept);
            sample("uvm_client_sleep_host_bytes", base + "ready\"", held - kept);
        }
    family("uvm_sleep_host_bytes", "gauge", "Pinned host memory the sleepable clients' backups hold.");
    sample("uvm_sleep_host_bytes", "", ms.sleep_host_bytes);
    family("uvm_sleep_host_limit_bytes", "gauge", "The limit on the backups' host memory (0: none).");
    sample("uvm_sleep_host_limit_bytes", "", ms.sleep_host_limit);
    family("uvm_client_sysmem_bytes", "gauge", "Sysmem of a client.");
    for (const auto &c : clients)
        sample("uvm_client_sysmem_bytes", "client=\"" + label_value(c->name) + "\"", c->sysmem.used.load());
    family("uvm_objects", "gauge", "Live objects of every backing.");
    sample("uvm_objects", "", ms.objects);
    family("uvm_sysmem_bytes", "gauge", "Host memory of sysmem objects.");
    sample("uvm_sysmem_bytes", "", ms.sysmem_bytes);
    family("uvm_managed_bytes", "gauge", "Managed memory of managed objects.");
    sample("uvm_managed_bytes", "", ms.managed_bytes);
    family("uvm_streams", "gauge", "Live streams.");
    sample("uvm_streams", "", ms.streams);
    family("uvm_retiring_bytes", "gauge", "Memory of freed objects waiting for GPU work.");
    sample("uvm_retiring_bytes", "", ms.retiring_bytes);
    family("uvm_stream_pool_bytes", "gauge", "Vidmem freed on streams, not yet back in the PMM.");
    sample("uvm_stream_pool_bytes", "", ms.stream_pool_bytes);
    return out;
}

OomRequest oom_request(const uvm_mem_alloc_params_t &params) {
    OomRequest r;
    r.size = params.size;
    r.backing = params.backing;
    r.gpu = params.gpu;
    r.chunk_size = params.chunk_size;
    r.flags = params.flags;
    r.client = params.client;
    return r;
}

OomRequest oom_request(const char *call, const Mem &mem) {
    OomRequest r;
    r.call = call;
    r.size = mem.alloc_size;
    r.gpu = mem.owner;
    r.client = mem.client ? mem.client->handle : nullptr;
    r.holding[0] = &mem;
    if (std::strcmp(call, "evict") == 0) {
        r.backing = UVM_BACKING_SYSMEM;  // what eviction could not get: host memory for the bytes
    } else {
        r.chunk_size = mem.chunk_size;
        r.flags = mem.flags;
    }
    return r;
}

}  // namespace uvm
