// The trace's exports: Chrome Trace Event JSON (opens in Perfetto's UI and
// chrome://tracing) and an SVG of memory over time per GPU and client.
//
// Both come from one replay of the ring's records over the objects that
// existed when it began. The ring keeps only the newest records, so that
// state is rebuilt: an object whose first record is not its alloc existed
// before the window (its record carries its size, backing, GPU and client),
// and a live object with no record at all existed through the whole window.
// With those, every byte in the window is accounted for, and every span
// (an object's life, a mapping, an eviction) has both ends: one cut by the
// window's edge gets the edge as its end and says so in its arguments.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/json_writer.h"
#include "pressure/client.h"
#include "uvm/manager.h"
#include "uvm/mem.h"
#include "observe/report.h"
#include "observe/trace.h"

namespace uvm {

void trace_mem(Manager &mgr, const Mem &mem, TraceKind kind, MapKind space, uint32_t target) {
    TraceRecord r;
    r.kind = kind;
    r.object = mem.handle;
    r.bytes = mem.alloc_size;
    r.backing = mem.backing;
    r.gpu = mem.owner;
    r.target = target;
    r.space = space;
    r.evictable = mem.evictable;
    // A discardable object's evictions drop its bytes: they take no host memory.
    r.discarded = (mem.flags & UVM_MEM_DISCARDABLE) != 0;
    r.client = mem.client ? mem.client->label : nullptr;
    r.tag = mem.tag;
    if (mem.owner < mgr.gpu_count())
        r.gpu_held = mgr.gpu(mem.owner).held_bytes.load(std::memory_order_relaxed);
    mgr.tracer().record(r);
}

namespace {

const char *const kMapNames[] = {"cpu_kernel", "cpu_user", "gpu_phys", "gpu_kernel", "gpu_user"};

std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
    return buf;
}

struct Obj {
    uint64_t bytes = 0;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint32_t gpu = 0;
    const char *client = nullptr;
    const char *tag = nullptr;
    bool discardable = false;
    bool resident = true;
};

Obj obj_of(const TraceRecord &r) {
    Obj o;
    o.bytes = r.bytes;
    o.backing = r.backing;
    o.gpu = r.gpu;
    o.client = r.client;
    o.tag = r.tag;
    o.discardable = r.discarded;
    return o;
}

struct Span {
    const char *cat;  // "object", "mapping", "evicted"
    std::string id;
    std::string name;
    uint32_t pool = 0;
    size_t series = 0;
    uint64_t begin = 0, end = 0;
    uint64_t bytes = 0;
    const char *tag = nullptr;
    bool before = false;  // began before the window
    bool after = false;   // still open when it ended
};

struct Sample {
    uint64_t t = 0;
    std::vector<uint64_t> v;  // bytes per series
    uint64_t held = 0;        // GPU pools: held from the GPU
};

// The replay: memory per pool (each GPU, then host) and series (each client
// by name, then evicted bytes), and the spans.
struct Timeline {
    uint32_t gpus = 0;
    std::vector<const char *> series;  // client names (nullptr: default); the last: "evicted"
    std::vector<std::vector<Sample>> pools;
    std::vector<Span> spans;
    std::vector<TraceRecord> ooms;
    std::vector<std::string> gpu_names;
    uint64_t end = 0, recorded = 0, dropped = 0;

    uint32_t host() const { return gpus; }
    size_t evicted_series() const { return series.size() - 1; }
};

class Replay {
public:
    explicit Replay(Timeline *tl) : tl_(*tl) {}

    void run(const std::vector<TraceRecord> &records, const std::vector<std::pair<uint64_t, Obj>> &live) {
        // The series: every client name seen, then the evicted bytes.
        series_index(nullptr);
        for (const auto &l : live)
            series_index(l.second.client);
        for (const TraceRecord &r : records)
            if (r.kind != TraceKind::Oom)
                series_index(r.client);
        tl_.series.push_back("evicted");  // the last series (Timeline::evicted_series)
        cur_.assign(tl_.gpus + 1, std::vector<uint64_t>(tl_.series.size(), 0));
        held_.assign(tl_.gpus + 1, 0);
        tl_.pools.assign(tl_.gpus + 1, {});

        // What existed when the window began.
        std::unordered_map<uint64_t, const TraceRecord *> first, first_move;
        for (const TraceRecord &r : records) {
            if (r.kind == TraceKind::Oom)
                continue;
            first.emplace(r.object, &r);
            if (r.kind == TraceKind::Evict || r.kind == TraceKind::Restore)
                first_move.emplace(r.object, &r);
        }
        std::unordered_map<uint64_t, const Obj *> live_now;
        for (const auto &l : live)
            live_now.emplace(l.first, &l.second);
        for (const auto &f : first) {
            if (f.second->kind == TraceKind::Alloc)
                continue;
            Obj o = obj_of(*f.second);
            auto move = first_move.find(f.first);
            auto now = live_now.find(f.first);
            if (move != first_move.end())
                o.resident = move->second->kind == TraceKind::Evict;
            else if (now != live_now.end())
                o.resident = now->second->resident;
            appear(f.first, o, 0, true);
        }
        for (const auto &l : live)
            if (!first.count(l.first))
                appear(l.first, l.second, 0, true);
        for (uint32_t p = 0; p <= tl_.gpus; ++p)
            sample(p, 0);

        for (const TraceRecord &r : records)
            apply(r);
        for (Span &s : tl_.spans)
            if (s.end == UINT64_MAX) {
                s.end = tl_.end;
                s.after = true;
            }
        for (uint32_t p = 0; p <= tl_.gpus; ++p)
            sample(p, tl_.end);
    }

private:
    size_t series_index(const char *client) {
        auto found = index_.find(client);
        if (found != index_.end())
            return found->second;
        index_.emplace(client, tl_.series.size());
        tl_.series.push_back(client);
        return tl_.series.size() - 1;
    }
    uint32_t pool(const Obj &o) const {
        return o.backing == UVM_BACKING_SYSMEM || o.gpu >= tl_.gpus ? tl_.host() : o.gpu;
    }
    void sample(uint32_t p, uint64_t t) {
        std::vector<Sample> &s = tl_.pools[p];
        if (s.empty() || s.back().t != t)
            s.emplace_back();
        s.back().t = t;
        s.back().v = cur_[p];
        s.back().held = held_[p];
    }
    size_t open(const char *cat, const std::string &id, std::string name, const Obj &o, uint64_t t, bool before) {
        Span s;
        s.cat = cat;
        s.id = id;
        s.name = std::move(name);
        s.pool = pool(o);
        s.series = series_index(o.client);
        s.begin = t;
        s.end = UINT64_MAX;
        s.bytes = o.bytes;
        s.tag = o.tag;
        s.before = before;
        tl_.spans.push_back(std::move(s));
        open_[std::string(cat) + id] = tl_.spans.size() - 1;
        return tl_.spans.size() - 1;
    }
    // Close the span; one never opened in the window began before it.
    void close(const char *cat, const std::string &id, std::string name, const Obj &o, uint64_t t) {
        const std::string key = std::string(cat) + id;
        if (!open_.count(key))
            open(cat, id, std::move(name), o, 0, true);
        close_if_open(key, t);
    }
    // End the span where it is open (nothing where it is not).
    void close_if_open(const std::string &key, uint64_t t) {
        auto found = open_.find(key);
        if (found == open_.end())
            return;
        tl_.spans[found->second].end = t;
        open_.erase(found);
    }
    // Add (sign +1) or take away (-1) the object's bytes where they are now:
    // its GPU (or host) under its client when resident; else the host's
    // evicted bytes, unless a discardable object dropped them.
    void account(const Obj &o, int sign) {
        uint64_t &bytes = o.resident ? cur_[pool(o)][series_index(o.client)]
                                     : cur_[tl_.host()][tl_.evicted_series()];
        if (o.resident || !o.discardable)
            bytes = sign > 0 ? bytes + o.bytes : bytes - o.bytes;
    }
    void appear(uint64_t handle, const Obj &o, uint64_t t, bool before) {
        objs_[handle] = o;
        open("object", hex(handle), object_name(o), o, t, before);
        account(o, +1);
        if (!o.resident)
            open("evicted", hex(handle), "evicted " + size_text(o.bytes), o, t, before);
    }
    static std::string object_name(const Obj &o) {
        std::string n = std::string(backing_text(o.backing)) + " " + size_text(o.bytes);
        if (o.tag)
            n += std::string(" [") + o.tag + "]";
        return n;
    }
    void open_mapping(const TraceRecord &r, const Obj &o, uint64_t t) {
        const std::string key = std::string("mapping") + map_id(r);
        if (open_.count(key))
            return;
        open("mapping", map_id(r), map_name(r), o, t, false);
        maps_of_[r.object].push_back(key);
    }
    static std::string map_id(const TraceRecord &r) {
        return hex(r.object) + ":" + kMapNames[static_cast<int>(r.space)] + ":" + std::to_string(r.target);
    }
    static std::string map_name(const TraceRecord &r) {
        std::string n = kMapNames[static_cast<int>(r.space)];
        if (r.space >= MapKind::GpuPhys)
            n += " on GPU " + std::to_string(r.target);
        return n;
    }

    void apply(const TraceRecord &r) {
        const uint64_t t = r.time_ns;
        if (r.gpu < tl_.gpus)
            held_[r.gpu] = r.gpu_held;
        if (r.kind == TraceKind::Oom) {
            tl_.ooms.push_back(r);
            if (r.gpu < tl_.gpus)
                sample(r.gpu, t);
            return;
        }
        auto found = objs_.find(r.object);
        if (found == objs_.end()) {
            // Only an alloc introduces an object here: the rest were set up
            // before the replay. A record of a dead handle cannot occur.
            if (r.kind != TraceKind::Alloc)
                return;
            appear(r.object, obj_of(r), t, false);
            sample(pool(obj_of(r)), t);
            return;
        }
        Obj &o = found->second;
        const uint32_t p = pool(o);
        switch (r.kind) {
            case TraceKind::Alloc:  // a handle value reused after its free was lost
                break;
            case TraceKind::Free: {
                account(o, -1);
                if (!o.resident)
                    close("evicted", hex(r.object), "evicted", o, t);
                close("object", hex(r.object), object_name(o), o, t);
                // Freeing removes every mapping.
                for (const std::string &key : maps_of_[r.object])
                    close_if_open(key, t);
                maps_of_.erase(r.object);
                sample(p, t);
                sample(tl_.host(), t);
                objs_.erase(found);
                break;
            }
            case TraceKind::Map:
                // A GPU virtual mapping makes the physical one first where
                // there is none (mem_map_gpu_virtual); managed objects have none.
                if ((r.space == MapKind::GpuKernel || r.space == MapKind::GpuUser) &&
                    r.backing != UVM_BACKING_MANAGED) {
                    TraceRecord phys = r;
                    phys.space = MapKind::GpuPhys;
                    open_mapping(phys, o, t);
                }
                open_mapping(r, o, t);
                break;
            case TraceKind::Unmap:
                close("mapping", map_id(r), map_name(r), o, t);
                if (r.space == MapKind::GpuPhys) {  // the GPU's virtual mappings go with it
                    TraceRecord v = r;
                    for (MapKind k : {MapKind::GpuKernel, MapKind::GpuUser}) {
                        v.space = k;
                        close_if_open(std::string("mapping") + map_id(v), t);
                    }
                }
                break;
            case TraceKind::Evict:
            case TraceKind::Restore:
                if (o.resident != (r.kind == TraceKind::Evict))
                    break;  // already there
                account(o, -1);
                o.resident = !o.resident;
                account(o, +1);
                if (o.resident)
                    close("evicted", hex(r.object), "evicted", o, t);
                else
                    open("evicted", hex(r.object), "evicted " + size_text(o.bytes), o, t, false);
                sample(p, t);
                sample(tl_.host(), t);
                break;
            case TraceKind::Oom:
                break;
        }
    }

    Timeline &tl_;
    std::unordered_map<const char *, size_t> index_;
    std::unordered_map<uint64_t, Obj> objs_;
    std::unordered_map<std::string, size_t> open_;  // cat + id -> span
    // Each object's mapping spans opened in the window (open or closed since),
    // so that a free ends those still open without a walk over every span.
    std::unordered_map<uint64_t, std::vector<std::string>> maps_of_;
    std::vector<std::vector<uint64_t>> cur_;
    std::vector<uint64_t> held_;
};

bool build(Manager &mgr, Timeline *tl) {
    std::vector<TraceRecord> records;
    if (!mgr.tracer().collect(&records, &tl->dropped, &tl->end))
        return false;
    tl->recorded = records.size() + tl->dropped;
    tl->gpus = mgr.gpu_count();
    for (uint32_t g = 0; g < tl->gpus; ++g)
        tl->gpu_names.push_back(mgr.gpu(g).info.name);
    std::vector<std::pair<uint64_t, Obj>> live;
    std::vector<uvm_mem_t *> handles;
    const auto objects = mgr.live_objects(&handles);
    for (size_t i = 0; i < objects.size(); ++i) {
        Mem &m = *objects[i];
        std::lock_guard<uvm::Mutex> guard(m.lock);
        if (m.gone())
            continue;
        Obj o;
        o.bytes = m.alloc_size;
        o.backing = m.backing;
        o.gpu = m.owner;
        o.client = m.client ? m.client->label : nullptr;
        o.tag = m.tag;
        o.discardable = (m.flags & UVM_MEM_DISCARDABLE) != 0;
        o.resident = !m.evicted;
        live.emplace_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handles[i])), o);
    }
    Replay(tl).run(records, live);
    return true;
}

std::string pool_name(const Timeline &tl, uint32_t p) {
    if (p == tl.host())
        return "host";
    return "GPU " + std::to_string(p) + " (" + tl.gpu_names[p] + ")";
}
const char *series_name(const Timeline &tl, size_t s) {
    return s == tl.evicted_series() ? "evicted" : tl.series[s] ? tl.series[s] : "default";
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

bool trace_chrome_json(Manager &mgr, std::string *out) {
    Timeline tl;
    if (!build(mgr, &tl))
        return false;
    Json j;
    j.open(nullptr, '{');
    j.str("displayTimeUnit", "ns");
    j.open("otherData", '{').str("generator", "uvm event trace").num("records", tl.recorded)
        .num("records_lost", tl.dropped).close('}');
    j.open("traceEvents", '[');
    for (uint32_t p = 0; p <= tl.gpus; ++p) {
        j.open(nullptr, '{').str("name", "process_name").str("ph", "M").num("pid", p);
        j.open("args", '{').str("name", pool_name(tl, p)).close('}').close('}');
        for (size_t s = 0; s < tl.series.size(); ++s) {
            j.open(nullptr, '{').str("name", "thread_name").str("ph", "M").num("pid", p).num("tid", s);
            j.open("args", '{').str("name", series_name(tl, s)).close('}').close('}');
        }
    }
    for (const Span &s : tl.spans) {
        for (int end = 0; end < 2; ++end) {
            j.open(nullptr, '{').str("name", s.name).str("cat", s.cat).str("ph", end ? "e" : "b").str("id", s.id)
                .num("pid", s.pool).num("tid", s.series).real("ts", us(end ? s.end : s.begin));
            j.open("args", '{').num("bytes", s.bytes);
            if (s.tag)
                j.str("tag", s.tag);
            if (!end && s.before)
                j.boolean("began_before_trace", true);
            if (end && s.after)
                j.boolean("open_at_end", true);
            j.close('}').close('}');
        }
    }
    for (const TraceRecord &r : tl.ooms) {
        j.open(nullptr, '{').str("name", "OUT_OF_MEMORY").str("cat", "oom").str("ph", "i").str("s", "p")
            .num("pid", r.gpu < tl.gpus ? r.gpu : tl.host()).num("tid", 0).real("ts", us(r.time_ns));
        j.open("args", '{').num("bytes", r.bytes).str("backing", backing_text(r.backing)).close('}').close('}');
    }
    for (uint32_t p = 0; p <= tl.gpus; ++p) {
        for (const Sample &smp : tl.pools[p]) {
            j.open(nullptr, '{').str("name", "memory").str("ph", "C").num("pid", p).real("ts", us(smp.t));
            j.open("args", '{');
            for (size_t s = 0; s < tl.series.size(); ++s)
                if (p == tl.host() || s != tl.evicted_series())
                    j.num(series_name(tl, s), smp.v[s]);
            j.close('}').close('}');
            if (p != tl.host()) {
                j.open(nullptr, '{').str("name", "held").str("ph", "C").num("pid", p).real("ts", us(smp.t));
                j.open("args", '{').num("bytes", smp.held).close('}').close('}');
            }
        }
    }
    j.close(']');
    j.close('}');
    *out = j.take();
    return true;
}

namespace {

std::string xml(const std::string &text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

// An axis of round ticks: `step` apart from 0 to `top` (a whole number of
// steps that holds the largest value), each tick's text in one unit.
struct Axis {
    uint64_t step = 1, top = 1;
};

// Bytes: a step of a power of two (at least 4 KiB), four or fewer steps to the top.
Axis byte_axis(uint64_t peak) {
    Axis a;
    a.step = 4096;
    while (a.step * 4 < peak && a.step < (1ull << 61))
        a.step *= 2;
    a.top = std::max<uint64_t>(1, (peak + a.step - 1) / a.step) * a.step;
    return a;
}

// Time: a step of 1, 2, 2.5 or 5 times a power of ten (ns, at least 10),
// six or fewer steps to the end.
Axis time_axis(uint64_t span_ns) {
    Axis a;
    for (uint64_t decade = 1;; decade *= 10) {
        for (uint64_t m4 : {40, 80, 100, 200}) {  // 1, 2, 2.5 and 5 tens, times four
            a.step = m4 * decade / 4;
            if (a.step * 6 >= span_ns || decade >= 100000000000000000ull) {
                a.top = std::max<uint64_t>(1, (span_ns + a.step - 1) / a.step) * a.step;
                return a;
            }
        }
    }
}

// `v` in `unit` with as few decimals as it needs (at most 3, as the axis's step).
std::string tick_text(uint64_t v, uint64_t step, double unit, const char *name) {
    int decimals = 0;
    for (double s = static_cast<double>(step) / unit; decimals < 3 && std::fabs(s - std::round(s)) > 1e-9;
         s *= 10)
        ++decimals;
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, static_cast<double>(v) / unit);
    std::string text = buf;
    if (decimals) {  // "1.50" reads as "1.5", "2.00" as "2"
        text.erase(text.find_last_not_of('0') + 1);
        if (text.back() == '.')
            text.pop_back();
    }
    return text + " " + name;
}

// A byte tick in the unit of the axis's top (KiB, MiB, GiB, TiB).
std::string byte_tick(uint64_t v, const Axis &a) {
    static const char *const kNames[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 3 && a.top >= (1ull << (10 * (u + 2))))
        ++u;
    return tick_text(v, a.step, static_cast<double>(1ull << (10 * (u + 1))), kNames[u]);
}

// A time tick in the unit of the axis's end (ns, us, ms, s).
std::string time_tick(uint64_t v, const Axis &a) {
    static const char *const kNames[] = {"ns", "us", "ms", "s"};
    int u = 0;
    double unit = 1;
    while (u < 3 && static_cast<double>(a.top) >= unit * 1000) {
        unit *= 1000;
        ++u;
    }
    return tick_text(v, a.step, unit, kNames[u]);
}

std::string time_text(uint64_t ns) {
    char buf[32];
    if (ns >= 1000000000ull)
        std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(ns) / 1e9);
    else if (ns >= 1000000ull)
        std::snprintf(buf, sizeof(buf), "%.2f ms", static_cast<double>(ns) / 1e6);
    else
        std::snprintf(buf, sizeof(buf), "%.1f us", static_cast<double>(ns) / 1e3);
    return buf;
}

const char *const kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

}  // namespace

bool trace_svg(Manager &mgr, std::string *out) {
    Timeline tl;
    if (!build(mgr, &tl))
        return false;
    constexpr int kLeft = 80, kPlotW = 760, kPlotH = 170, kGap = 60, kTop = 80, kLegendX = kLeft + kPlotW + 20;
    std::vector<uint32_t> shown;
    for (uint32_t p = 0; p <= tl.gpus; ++p) {
        bool any = p != tl.host();
        for (const Sample &s : tl.pools[p])
            for (uint64_t v : s.v)
                any = any || v;
        if (any)
            shown.push_back(p);
    }
    const int height = kTop + static_cast<int>(shown.size()) * (kPlotH + kGap) + 10;
    const uint64_t span_ns = std::max<uint64_t>(tl.end, 1);
    const Axis times = time_axis(span_ns);
    std::string svg;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
                  "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                  kLegendX + 200, height);
    svg += buf;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%d\" y=\"22\" font-size=\"15\">Memory over time, by client</text>\n"
                  "<text x=\"%d\" y=\"40\" fill=\"#555\">%" PRIu64 " records over %s%s</text>\n",
                  kLeft, kLeft, tl.recorded, time_text(tl.end).c_str(),
                  tl.dropped ? ", the oldest lost: the ring was full (the window starts with what was live)" : "");
    svg += buf;
    int y0 = kTop;
    for (uint32_t p : shown) {
        const std::vector<Sample> &samples = tl.pools[p];
        // One sample per pixel column: the one with the most memory, so peaks show.
        std::vector<const Sample *> cols;
        int last_col = -1;
        uint64_t peak = 0;
        auto total = [](const Sample &s) {
            uint64_t t = 0;
            for (uint64_t v : s.v)
                t += v;
            return t;
        };
        for (const Sample &s : samples) {
            const int col = static_cast<int>(static_cast<double>(s.t) / span_ns * kPlotW);
            peak = std::max({peak, total(s), s.held});
            if (col != last_col || cols.empty()) {
                cols.push_back(&s);
                last_col = col;
            } else if (total(s) >= total(*cols.back())) {
                cols.back() = &s;
            }
        }
        const Axis bytes = byte_axis(peak);
        const uint64_t ymax = bytes.top;
        auto X = [&](uint64_t t) { return kLeft + static_cast<double>(t) / span_ns * kPlotW; };
        auto Y = [&](uint64_t b) { return y0 + kPlotH - static_cast<double>(b) / ymax * kPlotH; };
        std::snprintf(buf, sizeof(buf), "<text x=\"%d\" y=\"%d\" font-size=\"13\">%s</text>\n", kLeft, y0 - 8,
                      xml(pool_name(tl, p)).c_str());
        svg += buf;
        // Stacked areas, drawn from the top of the stack down.
        for (size_t s = tl.series.size(); s-- > 0;) {
            bool any = false;
            for (const Sample *c : cols) {
                uint64_t cum = 0;
                for (size_t k = 0; k <= s; ++k)
                    cum += c->v[k];
                any = any || cum;
            }
            if (!any)
                continue;
            std::string path;
            double prev_y = Y(0);
            std::snprintf(buf, sizeof(buf), "M%.1f,%.1f", X(0), Y(0));
            path += buf;
            for (const Sample *c : cols) {
                uint64_t cum = 0;
                for (size_t k = 0; k <= s; ++k)
                    cum += c->v[k];
                std::snprintf(buf, sizeof(buf), " L%.1f,%.1f L%.1f,%.1f", X(c->t), prev_y, X(c->t), Y(cum));
                path += buf;
                prev_y = Y(cum);
            }
            std::snprintf(buf, sizeof(buf), " L%.1f,%.1f L%.1f,%.1f Z", X(tl.end), prev_y, X(tl.end), Y(0));
            path += buf;
            svg += "<path d=\"" + path + "\" fill=\"" + kColors[s % 10] + "\" stroke=\"none\"/>\n";
        }
        if (p != tl.host()) {  // what the GPU lends the manager
            std::string path;
            double prev_y = Y(cols.empty() ? 0 : cols.front()->held);
            std::snprintf(buf, sizeof(buf), "M%.1f,%.1f", X(0), prev_y);
            path += buf;
            for (const Sample *c : cols) {
                std::snprintf(buf, sizeof(buf), " L%.1f,%.1f L%.1f,%.1f", X(c->t), prev_y, X(c->t), Y(c->held));
                path += buf;
                prev_y = Y(c->held);
            }
            std::snprintf(buf, sizeof(buf), " L%.1f,%.1f", X(tl.end), prev_y);
            path += buf;
            svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"black\" stroke-dasharray=\"4,3\"/>\n";
        }
        for (const TraceRecord &r : tl.ooms)
            if ((r.gpu < tl.gpus ? r.gpu : tl.host()) == p) {
                std::snprintf(buf, sizeof(buf),
                              "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"red\"><title>OUT_OF_MEMORY: "
                              "%s</title></line>\n",
                              X(r.time_ns), X(r.time_ns), y0, y0 + kPlotH, size_text(r.bytes).c_str());
                svg += buf;
            }
        // Axes.
        std::snprintf(buf, sizeof(buf),
                      "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", kLeft, y0,
                      kPlotW, kPlotH);
        svg += buf;
        for (uint64_t b = 0; b <= ymax; b += bytes.step) {
            std::snprintf(buf, sizeof(buf),
                          "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text class=\"tick-bytes\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, kLeft + kPlotW, Y(b), Y(b), kLeft - 4, Y(b) + 4, byte_tick(b, bytes).c_str());
            svg += buf;
        }
        for (uint64_t t = 0; t <= span_ns; t += times.step) {
            std::snprintf(buf, sizeof(buf),
                          "<text class=\"tick-time\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                          X(t), y0 + kPlotH + 14, time_tick(t, times).c_str());
            svg += buf;
        }
        y0 += kPlotH + kGap;
    }
    // Legend: every series with memory somewhere.
    int ly = kTop;
    for (size_t s = 0; s < tl.series.size(); ++s) {
        bool any = false;
        for (const auto &pool : tl.pools)
            for (const Sample &smp : pool)
                any = any || smp.v[s];
        if (!any)
            continue;
        std::snprintf(buf, sizeof(buf),
                      "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                      kLegendX, ly, kColors[s % 10], kLegendX + 18, ly + 10, xml(series_name(tl, s)).c_str());
        svg += buf;
        ly += 18;
    }
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"black\" stroke-dasharray=\"4,3\"/>"
                  "<text x=\"%d\" y=\"%d\">held from the GPU</text>\n"
                  "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"red\"/><text x=\"%d\" y=\"%d\">out of memory</text>\n",
                  kLegendX, kLegendX + 12, ly + 6, ly + 6, kLegendX + 18, ly + 10, kLegendX, kLegendX + 12, ly + 24,
                  ly + 24, kLegendX + 18, ly + 28);
    svg += buf;
    svg += "</svg>\n";
    *out = std::move(svg);
    return true;
}

}  // namespace uvm
