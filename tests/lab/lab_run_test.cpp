// uvm-lab's options and results (lab/lab_run.h) and the browser lab's query
// mapping (lab/lab_server.h): every bad word gets its sentence, the query
// string becomes the command's flags, and the JSON the page draws from holds
// the numbers the command prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "lab/lab_options.h"
#include "lab/lab_run.h"
#include "lab/lab_server.h"

using namespace uvm::lab;

namespace {

std::string parse_error(const std::vector<std::string> &args) {
    LabOptions o;
    std::string why;
    EXPECT_FALSE(parse_options(args, &o, &why));
    return why;
}

}  // namespace

TEST(LabOptions, EveryBadWordIsNamed) {
    EXPECT_EQ(parse_error({"--workload", "bogus"}).rfind("unknown workload 'bogus'", 0), 0u);
    EXPECT_EQ(parse_error({"--policy", "4k,1g"}).rfind("unknown policy '1g'", 0), 0u);
    EXPECT_EQ(parse_error({"--machine", "a100"}).rfind("unknown machine 'a100'", 0), 0u);
    EXPECT_NE(parse_error({"--footprint-mib", "12abc"}).find("--footprint-mib needs"), std::string::npos);
    EXPECT_NE(parse_error({"--footprint-mib", "-3"}).find("--footprint-mib needs"), std::string::npos);
    EXPECT_NE(parse_error({"--footprint-mib", "0"}).find("--footprint-mib needs"), std::string::npos);
    EXPECT_NE(parse_error({"--accesses", ""}).find("--accesses needs"), std::string::npos);
    EXPECT_NE(parse_error({"--sweep", "64:1"}).find("--sweep needs"), std::string::npos);
    EXPECT_NE(parse_error({"--latency", "1:2"}).find("--latency needs"), std::string::npos);
    EXPECT_NE(parse_error({"--serve", "70000"}).find("--serve needs"), std::string::npos);
    EXPECT_EQ(parse_error({"--accesses"}), "--accesses: 1 required N missing");
    EXPECT_EQ(parse_error({"--colour", "blue"}), "The following arguments were not expected: --colour blue");
    // The largest footprint the simulator's host memory allows, and no more
    // (10^7 MiB used to be tried, and ran out of host memory).
    EXPECT_NE(parse_error({"--footprint-mib", "10000000"}).find("--footprint-mib needs a whole number of MiB, 1-1048576"),
              std::string::npos);
    EXPECT_NE(parse_error({"--sweep", "1:1048577"}).find("--sweep needs"), std::string::npos);
    LabOptions o;
    std::string why;
    EXPECT_TRUE(parse_options({"--footprint-mib", "1048576"}, &o, &why)) << why;
}

TEST(LabOptions, TheCommandsWordsSetTheRun) {
    LabOptions o;
    std::string why;
    ASSERT_TRUE(parse_options({"--machine", "h100", "--workload", "strided", "--footprint-mib", "512", "--stride",
                               "0x10000", "--policy", "4k,mosaic", "--l2", "4096:8"},
                              &o, &why))
        << why;
    EXPECT_EQ(o.machine, "h100");
    EXPECT_EQ(o.work.pattern, Pattern::Strided);
    EXPECT_EQ(o.work.footprint, 512ull << 20);
    EXPECT_EQ(o.work.stride, 0x10000u);
    EXPECT_EQ(o.policies, (std::vector<Policy>{Policy::Fixed4K, Policy::Mosaic}));
    EXPECT_EQ(o.model.l2.entries, 4096u);  // after --machine: it changes the preset
    EXPECT_EQ(o.model.l2.ways, 8u);
    EXPECT_EQ(o.bind, "127.0.0.1");  // the browser lab listens on loopback unless told
    // The machine's preset first wherever --machine is: the model's flags change it.
    ASSERT_TRUE(parse_options({"--sms", "7", "--machine", "h200"}, &o, &why)) << why;
    EXPECT_EQ(o.model.sms, 7u);
    EXPECT_EQ(o.work.processors, 7u);
}

TEST(LabServer, TheQueryBecomesTheCommandsFlagsMachineFirst) {
    std::vector<std::string> args;
    std::string why;
    ASSERT_TRUE(query_to_args({{"footprint_mib", "64"}, {"workload", "chase"}, {"machine", "h200"}, {"sweep", ""}},
                              &args, &why));
    // --machine first (the flags after it change its parts); an empty field
    // is the command's default.
    EXPECT_EQ(args, (std::vector<std::string>{"--machine", "h200", "--workload", "chase", "--footprint-mib", "64"}));
    EXPECT_FALSE(query_to_args({{"workload", "random"}, {"trace", "/etc/passwd"}}, &args, &why));
    EXPECT_EQ(why, "unknown parameter 'trace'");  // a path on the server is not the page's to name
    EXPECT_FALSE(query_to_args({{"validate", "all"}}, &args, &why));
}

TEST(LabRun, TheJsonHoldsTheNumbersTheTablePrints) {
    LabOptions o;
    std::string why;
    ASSERT_TRUE(parse_options({"--workload", "random", "--footprint-mib", "64", "--accesses", "20000", "--policy",
                               "4k,2m", "--costs", "H100"},
                              &o, &why))
        << why;
    LabOutcome r;
    ASSERT_TRUE(compute(o, &r, &why)) << why;
    ASSERT_EQ(r.rows.size(), 2u);
    EXPECT_TRUE(r.costed);
    EXPECT_GT(r.rows[0].stats.l2_misses, r.rows[1].stats.l2_misses);  // 4K walks more than 2M
    EXPECT_GT(r.rows[0].time.mapping, 0);                             // pinning charged at the H100's costs
    const std::string json = outcome_json(o, r);
    char walks[64];
    std::snprintf(walks, sizeof walks, "\"walks\":%llu,", static_cast<unsigned long long>(r.rows[0].stats.l2_misses));
    EXPECT_NE(json.find(walks), std::string::npos) << json;
    EXPECT_NE(json.find("\"policies\":[\"4K\",\"2M\"]"), std::string::npos);
    EXPECT_NE(json.find("\"pin_4k\":{\"call_us\":"), std::string::npos);
    // The table's walks column is the same count.
    FILE *f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    print_table(f, r.rows);
    std::rewind(f);
    char line[512];
    ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);  // the header
    ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);
    std::fclose(f);
    char policy[16];
    unsigned long long accesses = 0, table_walks = 0;
    double l1 = 0, l2 = 0;
    ASSERT_EQ(std::sscanf(line, "%15s %llu %lf%% %lf%% %llu", policy, &accesses, &l1, &l2, &table_walks), 5) << line;
    EXPECT_STREQ(policy, "4K");
    EXPECT_EQ(accesses, 20000u);
    EXPECT_EQ(table_walks, r.rows[0].stats.l2_misses);
}

TEST(LabRun, ABadTraceLineIsNamed) {
    char path[] = "/tmp/uvm-lab-test-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    FILE *f = fdopen(fd, "w");
    std::fputs("alloc 0x10000000000 0x200000\nw 0x10000000000 8\nbogus line\n", f);
    std::fclose(f);
    LabOptions o;
    std::string why;
    ASSERT_TRUE(parse_options({"--trace", path, "--policy", "4k"}, &o, &why)) << why;
    LabOutcome r;
    EXPECT_FALSE(compute(o, &r, &why));
    EXPECT_NE(why.find("line 3"), std::string::npos) << why;
    std::remove(path);
}
