// The page-size lab's cost model, coalesced translations, random replacement
// and the chase comparison, against cases computed by hand.
#include <gtest/gtest.h>

#include <sstream>

#include "lab/page_size_chase.h"
#include "lab/page_size_costs.h"
#include "lab/page_size_sim.h"
#include "uvm/uvm_lab.h"

using namespace uvm::lab;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;
constexpr uint64_t kBase = 1ull << 40;

// A device whose every cost is exactly linear:
//   pin 4K: 10 + 0.1 us per page; pin 2M: 5 + 20 us per page
//   create 8 us, map 1 us, set_access 20 + 10 us per handle
//   copies: 5 us + 1 us per 64 KiB (both ways)
// and composites made of exactly those parts.
std::string linear_file() {
    std::ostringstream f;
    f << "# a comment\ndevice,date,quantity,bytes,page_bytes,samples,median_us,min_us,max_us\n";
    for (uint64_t mib : {16, 64, 256}) {
        const uint64_t b = mib * M;
        f << "GPU A,2026-11-23,host_register," << b << ",4096,3," << 10 + 0.1 * double(b / (4 * K)) << ",1,1\n";
        f << "GPU A,2026-11-23,host_register," << b << ",2097152,3," << 5 + 20 * double(b / (2 * M)) << ",1,1\n";
    }
    f << "GPU A,2026-11-23,mem_create,2097152,2097152,9,8,1,1\n";
    f << "GPU A,2026-11-23,mem_map,2097152,2097152,9,1,1,1\n";
    for (uint64_t n : {1, 16, 128})
        f << "GPU A,2026-11-23,set_access," << n * 2 * M << ",2097152,3," << 20 + 10 * n << ",1,1\n";
    for (uint64_t b : {4 * K, 64 * K, 2 * M})
        for (const char *q : {"copy_h2d", "copy_d2h"})
            f << "GPU A,2026-11-23," << q << "," << b << "," << b << ",3," << 5 + double(b) / double(64 * K)
              << ",1,1\n";
    f << "GPU A,2026-11-23,growth," << 32 * M << ",2097152,3," << 16 * 9 + 20 + 10 * 16 << ",1,1\n";
    f << "GPU A,2026-11-23,map_object,2097152,2097152,9," << 1 + 20 + 10 << ",1,1\n";
    f << "GPU B,2026-11-23,mem_map,2097152,2097152,9,1,1,1\n";  // another device, incomplete
    return f.str();
}

std::vector<Measurement> rows_of(const std::string &text) {
    std::istringstream in(text);
    std::vector<Measurement> rows;
    std::string error;
    EXPECT_EQ(read_calibration(in, &rows, &error), UVM_OK) << error;
    return rows;
}

}  // namespace

TEST(PageSizeCosts, RelativeFitRecoversALine) {
    const CostCurve c = fit_relative({{1, 3}, {2, 5}, {4, 9}});
    EXPECT_NEAR(c.call_us, 1, 1e-9);
    EXPECT_NEAR(c.per_unit_us, 2, 1e-9);
    const CostCurve one = fit_relative({{4, 8}});
    EXPECT_EQ(one.call_us, 0);
    EXPECT_DOUBLE_EQ(one.per_unit_us, 2);
    EXPECT_EQ(fit_relative({}).per_unit_us, 0);
    EXPECT_EQ(fit_relative({{1, 3}, {2, -5}}).per_unit_us, 0);  // a point that is not positive
}

TEST(PageSizeCosts, BadRowsAreNamedByLine) {
    const char *bad[] = {
        "GPU,2026,host_register,4096,4096,3,1.0,1.0\n",          // 8 fields
        "GPU,2026,host_register,0,4096,3,1.0,1.0,1.0\n",         // zero bytes
        "GPU,2026,host_register,4096,4096,0,1.0,1.0,1.0\n",      // no samples
        "GPU,2026,host_register,4096,4096,3,-1,1.0,1.0\n",       // negative
        "GPU,2026,host_register,4096,4096,3,1.0x,1.0,1.0\n",     // not a number
        ",2026,host_register,4096,4096,3,1.0,1.0,1.0\n",         // no device
    };
    for (const char *line : bad) {
        std::istringstream in(std::string("# c\n") + line);
        std::vector<Measurement> rows;
        std::string error;
        EXPECT_EQ(read_calibration(in, &rows, &error), UVM_ERR_INVALID_ARGUMENT) << line;
        EXPECT_EQ(error.rfind("line 2: ", 0), 0u) << error;
        EXPECT_TRUE(rows.empty());
    }
}

TEST(PageSizeCosts, AnExactlyLinearDeviceIsFittedAndPredictedExactly) {
    const std::vector<Measurement> rows = rows_of(linear_file());
    EXPECT_EQ(calibration_devices(rows), (std::vector<std::string>{"GPU A", "GPU B"}));
    CostModel c;
    std::string error;
    ASSERT_EQ(fit_costs(rows, "gpu a", 0, &c, &error), UVM_OK) << error;
    EXPECT_NEAR(c.pin_us(1024 * M, 4 * K), 10 + 0.1 * 262144, 1e-6);
    EXPECT_NEAR(c.pin_us(1024 * M, 2 * M), 5 + 20 * 512, 1e-6);
    EXPECT_NEAR(c.pin_us(64 * K, 64 * K), 10 + 0.1 * 16, 1e-9);  // 64K pages pin as 16 pages of 4K
    EXPECT_NEAR(c.growth_us(1024 * M), 512 * 9 + 20 + 10 * 512, 1e-6);
    EXPECT_NEAR(c.map_object_us(), 31, 1e-9);
    EXPECT_NEAR(c.migrate_in_us(2 * M), 5 + 32, 1e-9);
    std::vector<Validation> v;
    CostModel fitted;
    ASSERT_EQ(validate_costs(rows, "GPU A", &v, &error, &fitted), UVM_OK) << error;
    EXPECT_EQ(fitted.map_object_us(), c.map_object_us());  // the same fit as fit_costs on every row
    EXPECT_EQ(fitted.pin_us(1024 * M, 4 * K), c.pin_us(1024 * M, 4 * K));
    ASSERT_EQ(v.size(), 6u + 3u + 6u + 1u + 1u);  // pins, set_access, copies, growth, map_object
    for (const Validation &r : v) {
        EXPECT_NEAR(r.error(), 0, 1e-9) << r.quantity << " " << r.bytes;
        EXPECT_NEAR(r.held_out_error(), 0, 1e-9) << r.quantity << " " << r.bytes;
    }
}

TEST(PageSizeCosts, AMissingDeviceOrQuantityIsNotFound) {
    const std::vector<Measurement> rows = rows_of(linear_file());
    CostModel c;
    std::string error;
    EXPECT_EQ(fit_costs(rows, "GPU C", 0, &c, &error), UVM_ERR_NOT_FOUND);
    EXPECT_NE(error.find("no device"), std::string::npos);
    EXPECT_EQ(fit_costs(rows, "GPU", 0, &c, &error), UVM_ERR_NOT_FOUND);  // both match
    EXPECT_NE(error.find("more than one"), std::string::npos);
    EXPECT_EQ(fit_costs(rows, "GPU B", 0, &c, &error), UVM_ERR_NOT_FOUND);
    EXPECT_NE(error.find("host_register"), std::string::npos);
}

TEST(PageSizeCosts, AnExactDeviceNameWinsOverALongerNameThatContainsIt) {
    std::string file = linear_file();
    for (size_t at; (at = file.find("GPU B")) != std::string::npos;)
        file.replace(at, 5, "GPU A NVL");
    const std::vector<Measurement> rows = rows_of(file);
    ASSERT_EQ(calibration_devices(rows), (std::vector<std::string>{"GPU A", "GPU A NVL"}));
    CostModel c;
    std::string error;
    ASSERT_EQ(fit_costs(rows, "gpu a", 0, &c, &error), UVM_OK) << error;  // GPU A, though both contain it
    EXPECT_NEAR(c.map_object_us(), 31, 1e-9);
    std::vector<Validation> v;
    ASSERT_EQ(validate_costs(rows, "GPU A", &v, &error), UVM_OK) << error;
    EXPECT_EQ(v.size(), 6u + 3u + 6u + 1u + 1u);
    EXPECT_EQ(fit_costs(rows, "NVL", 0, &c, &error), UVM_ERR_NOT_FOUND);  // GPU A NVL alone, without pins
    EXPECT_NE(error.find("host_register"), std::string::npos);
}

TEST(PageSizeCosts, TheLabsOwnCalibrationFileFitsEveryGpu) {
    std::vector<Measurement> rows;
    std::string error;
    ASSERT_EQ(load_calibration("", &rows, &error), UVM_OK) << error;
    const std::vector<std::string> devices = calibration_devices(rows);
    ASSERT_GE(devices.size(), 2u);
    for (const std::string &d : devices) {
        std::vector<Validation> v;
        CostModel c;
        ASSERT_EQ(validate_costs(rows, d, &v, &error, &c), UVM_OK) << error;
        EXPECT_GE(v.size(), 14u) << d;
        // The negative set_access intercept and negative predicted
        // times: no term and no prediction, fitted or held out, is negative.
        for (const CostCurve *k : {&c.pin_4k, &c.pin_2m, &c.set_access, &c.interleave, &c.copy_h2d, &c.copy_d2h}) {
            EXPECT_GE(k->call_us, 0) << d;
            EXPECT_GE(k->per_unit_us, 0) << d;
            EXPECT_GE(k->bend_us, 0) << d;
        }
        for (const Validation &r : v) {
            EXPECT_GT(r.model_us, 0) << d << " " << r.quantity << " " << r.bytes;
            EXPECT_GT(r.held_out_us, 0) << d << " " << r.quantity << " " << r.bytes;
        }
    }
    EXPECT_EQ(load_calibration("/nonexistent/calibration.csv", &rows, &error), UVM_ERR_NOT_FOUND);
}

TEST(PageSizeCosts, TimeCountsPinningAtAllocationAndCopiesAtFaults) {
    const std::vector<Measurement> rows = rows_of(linear_file());
    CostModel c;
    ASSERT_EQ(fit_costs(rows, "GPU A", 0, &c, nullptr), UVM_OK);
    MachineModel m;
    m.l1 = {16, 16};
    m.l2 = {64, 16};
    Simulator s(m, Policy::Fixed64K);
    ASSERT_TRUE(s.valid());
    s.set_costs(c);
    s.set_gpu_memory(64 * K);  // one 64K page resident at a time
    ASSERT_EQ(s.allocate(kBase, 1 * M), UVM_OK);
    EXPECT_NEAR(s.time().mapping, (10 + 0.1 * 256) * 1e3, 1e-6);  // 1 MiB as 256 pages of 4K
    Access a;
    a.address = kBase;
    s.access(a);  // fault in page 0
    a.address = kBase + 64 * K;
    s.access(a);  // fault in page 1, page 0 out
    EXPECT_EQ(s.stats().faults, 2u);
    EXPECT_NEAR(s.time().migration, (2 * (5 + 1) + (5 + 1)) * 1e3, 1e-6);
    EXPECT_NEAR(s.time().total(), s.time().translation() + s.time().mapping + s.time().migration, 1e-6);
}

TEST(PageSizeCoalescing, AWholeRegionOfTwoMegPagesTakesOneEntry) {
    MachineModel m;
    m.l1 = {4, 4};
    m.l2 = {8, 8};
    m.coalesce_bytes = 32 * M;
    Simulator s(m, Policy::Fixed2M);
    ASSERT_TRUE(s.valid());
    ASSERT_EQ(s.allocate(kBase, 64 * M), UVM_OK);        // two whole 32 MiB regions
    ASSERT_EQ(s.allocate(kBase + 64 * M, 8 * M), UVM_OK);  // part of a region: no coalescing
    Access a;
    for (int pass = 0; pass < 2; ++pass)
        for (uint64_t p = 0; p < 32; ++p) {
            a.address = kBase + p * 2 * M;
            s.access(a);
        }
    EXPECT_EQ(s.stats().l2_misses, 2u);  // one per region, on the first pass
    for (uint64_t p = 0; p < 4; ++p) {
        a.address = kBase + 64 * M + p * 2 * M;
        s.access(a);
    }
    EXPECT_EQ(s.stats().l2_misses, 6u);  // one per 2M page
    MachineModel bad = m;
    bad.coalesce_bytes = 3 * M;  // not a power of two
    EXPECT_FALSE(Simulator(bad, Policy::Fixed2M).valid());
    bad.coalesce_bytes = 2 * M;  // not above 2 MiB
    EXPECT_FALSE(Simulator(bad, Policy::Fixed2M).valid());
}

TEST(PageSizeReplacement, RandomReplacementMissesLessThanLruOnACycleTooBigForTheTlb) {
    uint64_t misses[2];
    for (int random = 0; random < 2; ++random) {
        MachineModel m;
        m.l1 = {1, 1};
        m.l2 = {64, 64};
        m.random_replacement = random != 0;
        Simulator s(m, Policy::Fixed4K);
        ASSERT_EQ(s.allocate(kBase, 65 * 4 * K), UVM_OK);
        Access a;
        for (int pass = 0; pass < 20; ++pass)
            for (uint64_t p = 0; p < 65; ++p) {
                a.address = kBase + p * 4 * K;
                s.access(a);
            }
        misses[random] = s.stats().l2_misses;
    }
    EXPECT_EQ(misses[0], 20u * 65);  // LRU: a cycle one page too big misses every time
    EXPECT_LT(misses[1], 20u * 65 / 2);
}

TEST(PageSizeChase, RowsParseAndTheModelIsAnchoredPerSeries) {
    std::istringstream in(
        "# GPU X, SM clock 2000 MHz\n"
        "memory,load,stride_kib,footprint_mib,elements,cycles_per_step,ns_per_step,cycles_min,cycles_max,reps\n"
        "vidmem,cg,2048,8,4,300.0,150.0,300,300,5\n"
        "vidmem,cg,2048,16,8,302.0,151.0,302,302,5\n"
        "vidmem,ca,2048,8,4,40.0,20.0,40,40,5\n"
        "host_4k,cg,64,0,4,2000.0,1000.0,2000,2000,5\n");
    std::vector<ChaseRow> rows;
    double ghz = 0;
    std::string error;
    ASSERT_EQ(read_chase(in, &rows, &ghz, &error), UVM_OK) << error;
    EXPECT_DOUBLE_EQ(ghz, 2.0);
    ASSERT_EQ(rows.size(), 4u);
    MachineModel m;
    ASSERT_TRUE(machine_preset("h100", &m));
    ASSERT_EQ(model_chase(m, ghz, "cg", &rows), UVM_OK);
    ASSERT_EQ(rows.size(), 3u);  // the ca row is dropped
    // Few pages: the model adds nothing, and both vidmem rows sit at the series' anchor (the median).
    EXPECT_DOUBLE_EQ(rows[0].model_cycles, rows[1].model_cycles);
    EXPECT_DOUBLE_EQ(rows[0].model_cycles, 302.0);
    EXPECT_DOUBLE_EQ(rows[2].model_cycles, 2000.0);

    std::istringstream no_clock("vidmem,cg,2048,8,4,300.0\n");
    EXPECT_EQ(read_chase(no_clock, &rows, &ghz, &error), UVM_ERR_INVALID_ARGUMENT);
    std::istringstream bad("# SM clock 1980 MHz\nvidmem,cg,0,8,4,300.0\n");
    EXPECT_EQ(read_chase(bad, &rows, &ghz, &error), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(error.rfind("line 2: ", 0), 0u) << error;
}

TEST(PageSizeLabApi, PresetsAndCostsThroughTheCApi) {
    uvm_lab_model_t m;
    ASSERT_EQ(uvm_lab_preset("h200", &m), UVM_OK);
    EXPECT_EQ(m.coalesce_bytes, 32 * M);
    EXPECT_EQ(uvm_lab_preset("nope", &m), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_lab_preset(nullptr, &m), UVM_ERR_INVALID_ARGUMENT);
    uvm_lab_t *lab = nullptr;
    m.reserved = 1;
    EXPECT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_2M, &lab), UVM_ERR_INVALID_ARGUMENT);
    m.reserved = 0;
    ASSERT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_2M, &lab), UVM_OK);
    char error[128] = {};
    EXPECT_EQ(uvm_lab_set_costs(lab, nullptr, "no such gpu", error, sizeof error), UVM_ERR_NOT_FOUND);
    EXPECT_NE(std::string(error).find("no device"), std::string::npos);
    EXPECT_EQ(uvm_lab_set_costs(lab, "/nonexistent.csv", "H200", error, sizeof error), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_lab_set_costs(lab, nullptr, nullptr, error, sizeof error), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(uvm_lab_set_costs(lab, nullptr, "H200", error, sizeof error), UVM_OK) << error;
    ASSERT_EQ(uvm_lab_allocate(lab, kBase, 1024 * M), UVM_OK);
    uvm_lab_stats_t st;
    ASSERT_EQ(uvm_lab_stats(lab, &st), UVM_OK);
    // Pinning 1 GiB of 2M pages at the H200's fit: within 25% of the 24.8 ms measured.
    EXPECT_GT(st.time_mapping_ns, 24.8e6 * 0.75);
    EXPECT_LT(st.time_mapping_ns, 24.8e6 * 1.25);
    ASSERT_EQ(uvm_lab_destroy(lab), UVM_OK);
    EXPECT_EQ(uvm_lab_set_costs(lab, nullptr, "H200", error, sizeof error), UVM_ERR_INVALID_HANDLE);
}

TEST(PageSizeCosts, NonNegativeLeastSquaresNeverGivesANegativeTerm) {
    // Ordinary least squares through these gives y = 2u - 1: a negative call.
    const CostCurve c = fit_relative({{1, 1}, {2, 3}, {4, 7}});
    EXPECT_EQ(c.call_us, 0);
    EXPECT_GT(c.per_unit_us, 0);
    EXPECT_GT(c.at(0.5), 0);
    // A concave curve (per unit falling with size) cannot bend downwards: the
    // bend stays zero, every term non-negative.
    const CostCurve concave = fit_curve({{16, 100}, {64, 300}, {256, 900}, {1024, 3000}});
    EXPECT_EQ(concave.bend_us, 0);
    EXPECT_GE(concave.call_us, 0);
    EXPECT_GT(concave.per_unit_us, 0);
    // Random point sets of every shape: never a negative term.
    uint64_t seed = 12345;
    const auto next = [&seed] {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return double((seed >> 11) % 100000 + 1);
    };
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<std::pair<double, double>> pts;
        for (int i = 0; i < 3 + trial % 4; ++i)
            pts.emplace_back(double(1 << (2 * i)), next());
        const CostCurve k = fit_curve(pts);
        EXPECT_GE(k.call_us, 0) << trial;
        EXPECT_GE(k.per_unit_us, 0) << trial;
        EXPECT_GE(k.bend_us, 0) << trial;
        EXPECT_GE(k.knee_units, 0) << trial;
        for (const auto &p : pts)
            EXPECT_GE(k.at(p.first), 0) << trial;
    }
    // nnls itself: the unconstrained solution (-1, 2) is not allowed; with x0
    // held at 0 the best x1 is sum(a1 b) / sum(a1^2) = (1 + 6 + 28) / (1 + 4 + 16).
    const std::vector<double> x = nnls({{1, 1}, {1, 2}, {1, 4}}, {1, 3, 7});
    ASSERT_EQ(x.size(), 2u);
    EXPECT_EQ(x[0], 0);
    EXPECT_NEAR(x[1], 35.0 / 21.0, 1e-12);
}

TEST(PageSizeCosts, ACurveWithAKnownKneeIsRecovered) {
    // Pinning whose per-page cost is 120 ns to 256 MiB (65,536 pages) and then
    // grows: 60 us + 0.12 us x n + 2e-7 us x (n - 65536)^2, at eight sizes.
    std::vector<std::pair<double, double>> pts;
    for (double mib : {16, 32, 64, 128, 256, 512, 1024, 2048}) {
        const double n = mib * 256, past = n > 65536 ? n - 65536 : 0;
        pts.emplace_back(n, 60 + 0.12 * n + 2e-7 * past * past);
    }
    const CostCurve c = fit_curve(pts);
    EXPECT_EQ(c.knee_units, 65536);
    EXPECT_NEAR(c.call_us, 60, 1e-6);
    EXPECT_NEAR(c.per_unit_us, 0.12, 1e-9);
    EXPECT_NEAR(c.bend_us, 2e-7, 1e-15);
    EXPECT_NEAR(c.marginal_at(65536 * 2), 0.12 + 2 * 65536 * 2e-7, 1e-9);
    // A straight line is fitted as one: no knee, no bend.
    std::vector<std::pair<double, double>> line;
    for (double n : {4096, 16384, 65536, 262144})
        line.emplace_back(n, 300 + 0.18 * n);
    const CostCurve l = fit_curve(line);
    EXPECT_EQ(l.bend_us, 0);
    EXPECT_EQ(l.knee_units, 0);
    EXPECT_NEAR(l.call_us, 300, 1e-6);
    EXPECT_NEAR(l.per_unit_us, 0.18, 1e-12);
}

TEST(PageSizeCosts, LeaveOneOutMatchesAHandComputation) {
    // Copies at three sizes that are not on one line; growth with an excess
    // of 3 us per handle over its parts at two sizes of three.
    std::string file = linear_file();
    for (const char *q : {"copy_h2d", "copy_d2h"})
        for (size_t at; (at = file.find(std::string("GPU A,2026-11-23,") + q)) != std::string::npos;)
            file.erase(at, file.find('\n', at) - at + 1);
    std::ostringstream extra;
    const std::pair<uint64_t, double> copies[] = {{4 * K, 10}, {64 * K, 14}, {2 * M, 60}};
    for (const auto &c : copies)
        for (const char *q : {"copy_h2d", "copy_d2h"})
            extra << "GPU A,2026-11-23," << q << "," << c.first << "," << c.first << ",3," << c.second << ",1,1\n";
    // set_access 20 + 10 us per handle at 1, 16 and 128 handles; growth at 16
    // handles is in linear_file (parts exactly); add 128 handles with 3 us a
    // handle more than its parts.
    extra << "GPU A,2026-11-23,growth," << 256 * M << ",2097152,3," << 128 * 9 + 20 + 10 * 128 + 3 * 128 << ",1,1\n";
    const std::vector<Measurement> rows = rows_of(file + extra.str());
    std::vector<Validation> v;
    std::string error;
    ASSERT_EQ(validate_costs(rows, "GPU A", &v, &error), UVM_OK) << error;
    const auto find = [&v](const char *q, uint64_t bytes) {
        for (const Validation &r : v)
            if (r.quantity == q && r.bytes == bytes)
                return r;
        ADD_FAILURE() << q << " " << bytes;
        return Validation{};
    };
    // Held out 64 KiB: the line through the other two points exactly (two
    // points, two non-negative terms).
    const double slope = (60.0 - 10.0) / double(2 * M - 4 * K), call = 10 - slope * double(4 * K);
    const Validation mid = find("copy_h2d", 64 * K);
    EXPECT_NEAR(mid.held_out_us, call + slope * double(64 * K), 1e-9);
    EXPECT_NEAR(mid.held_out_error(), (call + slope * double(64 * K)) / 14 - 1, 1e-12);
    // Held out 2 MiB: the line through (4 KiB, 10) and (64 KiB, 14).
    const double slope2 = 4.0 / double(60 * K), call2 = 10 - slope2 * double(4 * K);
    EXPECT_NEAR(find("copy_d2h", 2 * M).held_out_us, call2 + slope2 * double(2 * M), 1e-9);
    // Growth held out at 256 MiB sees only the 32 MiB row, which its parts
    // explain exactly: no interleave, the parts alone (set_access without its
    // 128-handle row is still 20 + 10 n).
    const Validation g = find("growth", 256 * M);
    EXPECT_NEAR(g.held_out_us, 128 * 9 + 20 + 10 * 128, 1e-6);
    EXPECT_NEAR(g.held_out_error(), double(128 * 9 + 20 + 10 * 128) / double(128 * 9 + 20 + 10 * 128 + 3 * 128) - 1,
                1e-9);
    // Held out 32 MiB, the interleave is fitted to the 256 MiB row alone:
    // any non-negative call + per handle through its 384 us excess; both
    // rows' own fit on every size is within the two excesses.
    CostModel all;
    ASSERT_EQ(fit_costs(rows, "GPU A", 0, &all, &error), UVM_OK) << error;
    EXPECT_GE(all.interleave.call_us, 0);
    EXPECT_GE(all.interleave.per_unit_us, 0);
    EXPECT_GT(all.interleave.at(128), 0);
    EXPECT_LT(all.interleave.at(128), 3 * 128);
}
