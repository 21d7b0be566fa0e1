// Runs the API fuzzer's inputs without libFuzzer: every file named, and every
// file of every folder named (the corpus, tests/fuzz/corpus). A build with
// any compiler replays the corpus this way, under the sanitizers too.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

bool run_file(const std::string &path) {
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) {
        std::fprintf(stderr, "cannot open %s\n", path.c_str());
        return false;
    }
    std::vector<uint8_t> bytes;
    uint8_t buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
        bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    size_t inputs = 0;
    for (int i = 1; i < argc; ++i) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            std::fprintf(stderr, "no such file or folder: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            inputs += run_file(argv[i]);
            continue;
        }
        DIR *dir = opendir(argv[i]);
        while (dirent *e = dir ? readdir(dir) : nullptr) {
            const std::string path = std::string(argv[i]) + "/" + e->d_name;
            if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
                inputs += run_file(path);
        }
        if (dir)
            closedir(dir);
    }
    std::printf("replayed %zu inputs, every one matched the model\n", inputs);
    return inputs > 0 ? 0 : 1;
}
